"""A process making many LLM calls at once against one budget, for the budget concurrency test.

    python -m tests.budget_caller DATABASE_URL NAME CALLS DELAY

Makes CALLS direct calls of `llm.chat.complete` at once (a thread each, released together),
through `OpCaller` as `remit call` does: each reserves $0.10 against the app's $10.00 monthly
budget, waits DELAY seconds in the fake vendor, then settles at $0.10 with its ledger row.
Prints `ok N refused M` when every call has answered.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter

from remit import Budget, FakeLLM, FakeReply, Price, chat_complete
from remit.budgets.store import Budgets
from remit.connectors.llm import ChatRequest
from remit.core.clock import SystemClock
from remit.core.database import Database
from remit.core.ledger import LedgerStore
from remit.core.outcome import Ok
from remit.core.runs import RunInfo
from remit.execution.calls import OpCaller
from remit.people.tasks import TaskOpener

APP = "budget-race"
LIMIT = Budget(10)
# A dime per output token, the prompt free; each call may answer one token: $0.10 exactly.
PRICES = {"dime": Price(input="0", output="100000")}
ASKED = ChatRequest(model="dime", messages=[{"role": "user", "content": "?"}], max_tokens=1)


def main(url: str, name: str, calls: int, delay: float) -> None:
    db = Database(url, pool_size=8)
    clock = SystemClock()
    caller = OpCaller(
        implementations={"llm": FakeLLM([FakeReply("!", output_tokens=1)] * calls, delay=delay)},
        ledger=LedgerStore(db, clock=clock),
        clock=clock,
        environ={},
        tasks=TaskOpener(db, APP, clock=clock),
        budgets=Budgets(db, APP, [LIMIT], clock=clock),
        prices=PRICES,
    )
    payload = ASKED.model_dump(mode="json")
    start = threading.Barrier(calls)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def one(i: int) -> None:
        call_id = f"call_{name}_{i}"
        run = RunInfo(run_id=call_id, attempt=1, workflow_id=call_id, actor="agent:t", direct=True)
        start.wait()
        outcome = caller.call(run, chat_complete, payload, step_id=0, key=f"{call_id}:0")
        kind = "ok" if isinstance(outcome, Ok) else outcome.failure.kind
        with lock:
            outcomes[kind] += 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    db.dispose()
    print(
        f"ok {outcomes['ok']} refused {outcomes['budget']} other {sum(outcomes.values()) - outcomes['ok'] - outcomes['budget']}"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
