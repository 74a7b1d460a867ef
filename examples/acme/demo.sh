#!/usr/bin/env bash
# The ar-desk demo, on fakes and the embedded SQLite database, under the desk's policies
# (policies/desk.cedar: ann is a clerk, carol a controller):
#   1. ann, a clerk, chases an overdue invoice: chase-invoice has the model draft a reminder
#      (billed to the desk's monthly budget, shown by `remit budgets`) and sends it;
#   2. ann proposes a write-off, which waits for a person's approval;
#   3. ann may not approve it in full (over a clerk's 500.00): the policies refuse, and say why;
#   4. carol, a controller, approves it for a lower amount through the HTTP API with her API
#      token (the API refuses a request without one), and the run carries on from the gate;
#   5. the invoice's activity: every run, gate and decision about it, in order;
#   6. scale to zero: the desk served by `remit serve --worker --stop-when-idle` stops its worker
#      while a follow-up sleeps, having registered the sleep's end with a wakeup service (run
#      here on loopback), which starts the worker again at that moment;
#   7. declared resources: sam plans and applies the desk's container, DNS name and database
#      (resources/desk.py) on fake vendors, drift finds a change made behind remit's back, and
#      moving the database, a replace, waits for carol's approval before anything is deleted.
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
echo "== 4. carol decides from her laptop, through the HTTP API: it acts only with an API token"
# sam, an admin, makes carol a token; it is printed once, and only its hash is kept.
token="$(r tokens create --for user:carol --name laptop --expires 1d --as user:sam)"
serve_log="$(mktemp)"
"$remit" --app "$app" serve --port 0 >"$serve_log" 2>&1 &
server=$!
stop_all() { # end the servers the demo started, and wait until they have
    for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
    for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}
trap 'stop_all "$server"' EXIT
url=""
for _ in $(seq 1 300); do
    url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$serve_log" | head -n 1 || true)"
    [ -n "$url" ] && break
    sleep 0.1
done
if [ -z "$url" ]; then
    echo "remit serve did not start:" >&2
    cat "$serve_log" >&2
    exit 1
fi
remote() { REMIT_URL="$url" "$remit" --app "$app" "$@"; }
echo "-- a decision sent without a token: the API answers 401 and decides nothing"
python3 - "$url" "$approval" <<'PY'
import json, sys, urllib.error, urllib.request

url, approval = sys.argv[1:]
request = urllib.request.Request(
    f"{url}/approvals/{approval}/decision",
    data=json.dumps({"decision": "approved"}).encode(),
    headers={"Content-Type": "application/json", "Idempotency-Key": "no-token"},
)
try:
    urllib.request.urlopen(request)
    sys.exit("the API decided without a token")
except urllib.error.HTTPError as refused:
    print(f"POST /approvals/{approval}/decision: {refused.code} {json.load(refused)['error']}")
PY
echo "-- with carol's token, she approves it for 500.00 EUR instead of the full balance"
REMIT_TOKEN="$token" remote approve "$approval" --edit '{"amount": 50000}' \
    --reason "settled 500.00 with the administrator"

wait "$runner"

echo
echo "== 5. everything that happened about invoice inv_1003, in order"
r activity invoice inv_1003

echo
echo "== 6. scale to zero: the worker stops while a follow-up sleeps, and is woken at its end"
wakeup_dir="$(mktemp -d)"
wakeup_db="sqlite:///$wakeup_dir/wakeup.sqlite"
listening() { # the URL a server printed in its log, once it listens
    for _ in $(seq 1 300); do
        found="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$1" | head -n 1 || true)"
        [ -n "$found" ] && { echo "$found"; return 0; }
        sleep 0.1
    done
    echo "no server listening:" >&2
    cat "$1" >&2
    return 1
}
# The wakeup service, on loopback for the demo (--allow-private); its own database.
"$remit" wakeup serve --port 0 --allow-private --database "$wakeup_db" >"$wakeup_dir/service.log" 2>&1 &
service=$!
trap 'stop_all "$server" "$service"' EXIT
export REMIT_WAKEUP_URL="$(listening "$wakeup_dir/service.log")"
export REMIT_WAKEUP_ACCOUNT_TOKEN="$("$remit" wakeup accounts create ar-desk --database "$wakeup_db")"
echo "-- the wakeup service listens on $REMIT_WAKEUP_URL; the desk has an account there"
# Quick settings for a demo: sleeps suspend at once, and a deadline 2 s away is far enough.
export REMIT_SUSPEND_AFTER=0 REMIT_IDLE_HORIZON=2 REMIT_IDLE_CHECK_INTERVAL=0.5 REMIT_SWEEP_INTERVAL=0.5
"$remit" --app "$app" serve --worker --stop-when-idle --port 0 >"$wakeup_dir/instance.log" 2>&1 &
instance=$!
trap 'stop_all "$server" "$service" "$instance"' EXIT
instance_url="$(listening "$wakeup_dir/instance.log")"
r wakeup connect "$instance_url" --as user:sam
# The desk's only deadline is its morning drift check: once connected, the worker registers it
# with the service and stops.
status=""
for _ in $(seq 1 300); do
    status="$(r wakeup status)"
    grep -q 'worker: *stopped' <<<"$status" && break
    sleep 0.1
done
echo "-- with nothing due before the morning's drift check, the worker registered it and stopped"
grep -E '^(worker|registered):' <<<"$status"
follow="$(r start follow-up --as user:ann --input '{"invoice_id": "inv_1001", "wait_seconds": 6}')"
echo "-- ann starts follow-up $follow: it sleeps 6 s; with nothing else to do, the worker stops"
status=""
for _ in $(seq 1 100); do
    status="$(r wakeup status)"
    grep -q 'worker: *stopped' <<<"$status" && grep -q "$follow wakes from its sleep" <<<"$status" && break
    sleep 0.1
done
echo "$status"
for _ in $(seq 1 300); do
    [ "$(r runs --workflow follow-up --status done --limit 1 | grep -c "$follow" || true)" = 1 ] && break
    sleep 0.2
done
echo "-- at the sleep's end the wakeup service called GET /wake: the worker started and finished it"
r show "$follow"
echo "-- what the instance printed"
cat "$wakeup_dir/instance.log"

echo
echo "== 7. declared resources: what the desk runs on, planned, applied and watched for drift"
# A working copy of the desk, as a person edits one: its data files change below.
work="$(mktemp -d)"
cp -r "$app" "$work/ar_desk"
rm -rf "$work/ar_desk/.remit" "$work/ar_desk/remit.lock"
export REMIT_FAKES_DIR="$work/fakes"
unset REMIT_WAKEUP_URL REMIT_WAKEUP_ACCOUNT_TOKEN
w() { "$remit" --app "$work/ar_desk" "$@"; }
planned() { # `remit plan`, whose exit says whether anything would change (0 no, 2 yes)
    code=0
    w plan || code=$?
    echo "-- remit plan exited $code"
}
echo "-- nothing exists yet: the plan creates all three, in the order their references need"
planned
echo "-- sam stores the mail password the container gets, then applies: a durable run"
echo "smtp-demo-password" | w secrets set SMTP_PASSWORD --as user:sam
w apply --yes --as user:sam
echo "-- remit.lock binds each declaration to the vendor's id (it goes in git with the files)"
cat "$work/ar_desk/remit.lock"
w resources
echo "-- someone changes the DNS record's TTL at the vendor's console; drift finds it"
python_bin="$(dirname "$(command -v "$remit")")/python"
[ -x "$python_bin" ] || python_bin=python3
PYTHONPATH="$work" "$python_bin" -c '
from ar_desk.connectors.dns import FakeDns, record
fake = FakeDns()
for record_id in fake.records(record):
    fake.tamper(record, record_id, ttl=60)
    print("-- the vendor now has ttl 60 on", record_id)
'
code=0
w drift --as user:sam || code=$?
echo "-- remit drift exited $code"
echo "-- sam moves the database to us-east-1 in the data file: its region cannot change in place"
sed -i 's/region="eu-west-1"/region="us-east-1"/' "$work/ar_desk/resources/desk.py"
planned
w apply --yes --as user:sam >"$work/apply.log" 2>&1 &
applying=$!
trap 'stop_all "$server" "$service" "$instance" "$applying"' EXIT
gate=""
for _ in $(seq 1 300); do
    gate="$(grep -o 'approval [a-z]*_[0-9a-f]*' "$work/apply.log" | head -n 1 | cut -d' ' -f2 || true)"
    [ -n "$gate" ] && break
    sleep 0.1
done
echo "-- the apply waits at approval $gate: nothing is deleted until a controller decides"
w approvals --pending
w approve "$gate" --as user:carol
wait "$applying"
cat "$work/apply.log"
echo "-- the old database is gone, the new one made and its URL stored; the TTL is 300 again"
w resources
w secrets list
