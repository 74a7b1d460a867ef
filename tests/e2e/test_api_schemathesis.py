"""The HTTP API against its own OpenAPI spec: schemathesis generates requests for every
operation from the spec, ones that fit it and ones that break it, sends them to the ASGI app
with a token whose principal the app lets do anything (the test shop has no policies), and
checks each answer with its default checks: no 5xx; a status, content type, headers and body the
spec describes; a request that breaks the spec refused; one without its token 401. Bounded to
20 examples of each kind per operation, on each database.

One check is loosened, for seven operations: a request that fits the spec may still be refused
with 422 by POST /runs and POST /calls (the input is parsed against the workflow's or op's own
model), by the two decisions (edits are parsed against the approval type's draft, and go with
an approval only), since the spec cannot say what each workflow, op or approval type takes, by
a record's two routes, whose type and id may hold no control or format character (Unicode's
categories, which a JSON Schema pattern cannot name), and by GET /runs, whose `record` is such a
type and id and whose `since` is a date, a time or a span as a person types it.

The operations are walked by hand rather than with `schema.parametrize()`: its pytest plugin
reads `Function._nodeid`, which the pytest this project pins (9.2) no longer has.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from remit.serve.api import create_api
from remit.testing import Harness
from tests.e2e.test_api_routes import ROUTES
from tests.support import make_app

# Cases drawn per operation and mode: about 1,300 requests a database. The suite's slowest
# test (150 s a database at 20); its time is the suite's bound's, so the draw is kept small.
EXAMPLES = 15
# Where the spec cannot say what the app's own models take: a 422 is a right answer there.
PARSED_BY_THE_APP = [
    "GET /runs",
    "POST /runs",
    "POST /calls",
    "POST /approvals/{approval_id}/decision",
    "POST /approvals/decisions",
    "GET /records/{record_type}/{record_id}/activity",
    "POST /records/{record_type}/{record_id}/archive",
]
CONFIG = {
    "operations": [
        {
            "include-name": PARSED_BY_THE_APP,
            "checks": {
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "401", "403", "404", "409", "422"]
                }
            },
        }
    ]
}


@pytest.fixture
def shop(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    # Secrets are set through the API: their key file is made in the test's own folder.
    monkeypatch.chdir(tmp_path)
    with Harness(make_app(), database_url=database_url) as running:
        yield running


# schemathesis's strategies use the `random` module, which hypothesis warns about.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_every_answer_is_one_the_spec_describes(shop: Harness) -> None:
    _, made = shop.client.services.tokens.create("user:ann", by="user:admin")
    api = create_api(shop.client, allowed_hosts=["testserver"])
    # The token as the spec's bearer scheme: schemathesis sends it with every request, knows
    # it for what it is, and sends some without it to see them refused.
    config = schemathesis.Config.from_dict(
        {**CONFIG, "auth": {"openapi": {"HTTPBearer": {"bearer": made}}}}
    )
    spec = {"Authorization": f"Bearer {made}"}  # the spec itself is served behind the token
    schema = schemathesis.openapi.from_asgi("/openapi.json", api, headers=spec, config=config)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(map(len, ROUTES.values()))  # every operation, /health too

    failures: list[str] = []
    for operation in operations:
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            )
            def check(case: schemathesis.Case) -> None:
                case.call_and_validate()

            try:
                check()
            except Unsatisfiable:
                # Nothing to break: the operation takes no parameters and no body (/health).
                assert mode == schemathesis.GenerationMode.NEGATIVE, operation.label
            except (Exception, BaseExceptionGroup) as failed:
                failures.append(f"{operation.label} ({mode}): {failed}")
    assert not failures, "\n\n".join(failures)
