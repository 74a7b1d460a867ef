"""`remit apps`: the apps of a repo, each with its workflows (the op `remit.apps.list`)."""

from __future__ import annotations

from remit.cli.base import ActAs, AppDir, AsJson, PlainTable, cli, client_of, out, print_json

ROOT_ROW = "(root)"


@cli.command()
def apps(
    as_json: AsJson = False,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """List the repo's apps (apps/<app>/) with their workflows, and the root's workflows.

    It calls the op remit.apps.list, so the app's policies decide who may list them
    (Action::"call" on Op::"remit.apps.list"), here and through --url alike.
    """
    with client_of(app_dir) as remit:
        listed = remit.calls.call("remit.apps.list", {}, by=as_).output
    if as_json:
        from remit.connectors.apps import AppEntry

        # An entry each, as `remit.apps.list` answers them; the root's first, named "".
        print_json([AppEntry(name="", workflows=listed["workflows"]), *listed["apps"]])
        return
    table = PlainTable("app", "workflows", "collections")
    table.add_row(ROOT_ROW, " ".join(listed["workflows"]), "")
    for entry in listed["apps"]:
        table.add_row(entry["name"], " ".join(entry["workflows"]), " ".join(entry["collections"]))
    out.print(table)
