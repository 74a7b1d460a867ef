"""Acme's operations repo: the company's connectors, policies and what it runs on, at the root,
and one folder per team's app under `apps/`.

The root declares what every app shares: the vendors Acme works with (`connectors/`), the
monthly budget for model calls ($5.00 across the repo), and the morning drift check of the
resources in `resources/` (`remit plan`, `remit apply`; README, "Resources"). Who may do what is
in `policies/` (Cedar). The repo itself is at Acme's git host (`connectors/forge.py`): a branch
of it becomes a change, checked, reviewed by a controller, merged and deployed to the desk's
container (`remit change open BRANCH`). The workflows are the apps' own: `apps/ar/` is accounts
receivable, which chases overdue invoices, writes off what will not be paid, and duns a
customer for a month (`remit apps` lists them). Its scenarios (`apps/ar/scenarios/`) say what
it does in sentences; `make demo` plays `demo/tour.remit` on fakes. Everyone may ask the
operator agent (`remit chat`); what it proposes, they confirm, under the same policies.
"""

from __future__ import annotations

from decimal import Decimal

from remit import App, Budget, OperatorAgent, schedule

from .connectors import dns, forge, hosting, pgcloud
from .connectors.llm import llm
from .connectors.mail import mail
from .connectors.payments import payments

app = App(
    name="acme",
    workflows=[],  # each app's, from apps/<app>/workflows/
    connectors=[
        payments,
        mail,
        llm,
        dns.connector,
        hosting.connector,
        pgcloud.connector,
        forge.connector,
    ],
    # The operations repo at Acme's git host, which the forge connector's remote serves.
    repo="https://git.acme.test/acme/ops.git",
    budgets=[Budget(Decimal("5.00"))],
    # The built-in `drift` compares the vendors with resources/*.py every morning.
    drift_schedule=schedule("0 6 * * *", tz="Europe/Helsinki"),
    # The operator agent (`remit chat`, the console's Ask page): it answers each person from
    # what they may read, and proposes acts they confirm. On fakes its model follows
    # the script in connectors/operator.py.
    agent=OperatorAgent(model="gpt-4o-mini"),
)
