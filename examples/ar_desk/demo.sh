#!/usr/bin/env bash
# The ar-desk demo, on fakes and the embedded SQLite database:
#   1. chase-invoice sends a reminder for an overdue invoice;
#   2. write-off proposes writing off an invoice and waits for a person's approval; the
#      approver lowers the amount from the command line, and the run carries on from the gate.
# Usage: examples/ar_desk/demo.sh [path/to/remit]
set -euo pipefail

remit="${1:-remit}"
app="$(cd "$(dirname "$0")" && pwd)"
export REMIT_FAKES=1
r() { "$remit" --app "$app" "$@"; }

echo "== 1. chase-invoice: remind the customer of an overdue invoice"
r run chase-invoice --input '{"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}'

echo
echo "== 2. write-off: propose writing off inv_1003 and wait for approval"
r run write-off --input '{"invoice_id": "inv_1003", "reason": "customer in administration"}' \
    --timeout 120 &
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
echo "== 3. approve it for 500.00 EUR instead of the full balance"
r approve "$approval" --edit '{"amount": 50000}' --reason "settled 500.00 with the administrator"

wait "$runner"
