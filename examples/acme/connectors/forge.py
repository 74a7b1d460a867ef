"""The forge connector: the git host of acme's operations repo, `https://git.acme.test/`.

It declares no ops of its own: its `remote` is what remit's change workflow uses to open a change
request for a branch, post each check's result on its head commit, read `/merge` comments and
merge it. The driver speaks the forge's REST API in GitHub's shape at `FORGE_API_URL` with
`FORGE_API_TOKEN` as a Bearer token (`POST /repos/{owner}/{name}/pulls`, `.../statuses/{sha}`,
`.../issues/{number}/comments`, `PUT .../pulls/{number}/merge`), each write with an
`Idempotency-Key` header. The forge signs its webhooks with remit's secret
`FORGE_WEBHOOK_SECRET` and sends them to `POST /forge/forge/events`.

The fake holds its repos as bare git repos in `$REMIT_FAKES_DIR/forge-git/` and its change
requests in `$REMIT_FAKES_DIR/forge.jsonl`, so every process of a demo sees one forge.
"""

from __future__ import annotations

from remit import Connector, FakeForge, ForgeDriver, Remote

connector = Connector(
    "forge",
    ops=[],
    driver=ForgeDriver,
    fake=FakeForge,
    remote=Remote(urls=("https://git.acme.test/",), driver=ForgeDriver, fake=FakeForge),
    description="The git host of the operations repo: change requests, statuses, merges.",
)
