#!/usr/bin/env bash
# The ar-desk demo, on fakes and the embedded SQLite database, under the desk's policies
# (policies/desk.cedar: ann is a clerk, carol a controller):
#   1. ann, a clerk, chases an overdue invoice: chase-invoice has the model draft a reminder
#      (billed to the desk's monthly budget, shown by `remit budgets`) and sends it;
#   2. ann proposes a write-off, which waits for a person's approval;
#   3. ann may not approve it in full (over a clerk's 500.00): the policies refuse, and say why;
#   4. carol, a controller, approves it for a lower amount, and the run carries on from the gate.
# Usage: examples/ar_desk/demo.sh [path/to/remit]
set -euo pipefail

remit="${1:-remit}"
app="$(cd "$(dirname "$0")" && pwd)"
export REMIT_FAKES=1
r() { "$remit" --app "$app" "$@"; }

echo "== 1. ann (a clerk) runs chase-invoice: remind the customer of an overdue invoice"
r run chase-invoice --as user:ann --input '{"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}'
echo "-- the desk's budget: the chase's model call settled at its cost, nothing left reserved"
r budgets

echo
echo "== 2. ann proposes writing off inv_1003; the run waits for approval"
r run write-off --as user:ann --timeout 120 \
    --input '{"invoice_id": "inv_1003", "reason": "customer in administration"}' &
runner=$!
approval=""
for _ in $(seq 1 300); do
    approval="$(r approvals --pending --quiet)"
    [ -n "$approval" ] && break
    sleep 0.2
done
if [ -z "$approval" ]; then
    echo "the write-off run never reached its approval" >&2
    kill "$runner" 2>/dev/null || true
    exit 1
fi
r runs --workflow write-off
r approvals

echo
echo "== 3. ann tries to approve the full 612.50: over a clerk's limit, so the policies refuse"
if r approve "$approval" --as user:ann; then
    echo "the policies let a clerk approve 612.50" >&2
    exit 1
fi
r denials

echo
echo "== 4. carol (a controller) approves it for 500.00 EUR instead of the full balance"
r approve "$approval" --as user:carol --edit '{"amount": 50000}' \
    --reason "settled 500.00 with the administrator"

wait "$runner"
