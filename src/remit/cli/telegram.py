"""`remit telegram`: Telegram as an approval channel (see `people/telegram.py`).

Workers send each gate's recipients Approve and Reject buttons when `REMIT_TELEGRAM_API` is set
and the bot token is stored (`remit secrets set TELEGRAM_BOT_TOKEN`); `remit serve` takes the
taps at `/telegram/webhook`, which `set-webhook` registers with Telegram.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from typing import Annotated

import typer

from remit.cli.base import ActAs, AppDir, cli, command_group, local_client, out

telegram_cli = command_group(
    "Telegram as an approval channel: register the webhook remit serve takes taps at.",
    no_args_is_help=True,
)
cli.add_typer(telegram_cli, name="telegram")


@telegram_cli.command("set-webhook")
def set_webhook(
    url: Annotated[
        str,
        typer.Argument(help="Where Telegram reaches remit serve: https://<host>/telegram/webhook."),
    ],
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Have Telegram send button taps to URL, signed with the webhook's secret (made and stored
    as the secret TELEGRAM_WEBHOOK_SECRET the first time)."""
    import secrets

    from remit.core.errors import RemitError
    from remit.people.telegram import WEBHOOK_SECRET, TelegramBot, stored_token
    from remit.serve.telegram import WEBHOOK_PATH

    if not url.startswith(("https://", "http://")) or not url.endswith(WEBHOOK_PATH):
        raise RemitError(
            f"{url!r} is not the webhook's address: give https://<host>{WEBHOOK_PATH}, where "
            "Telegram reaches `remit serve`"
        )
    with local_client(app_dir, command="telegram set-webhook") as remit:
        api = remit.settings.telegram_api
        if api is None:
            raise RemitError(
                "REMIT_TELEGRAM_API is not set: set it to https://api.telegram.org (Telegram's "
                "Bot API) for workers and `remit serve` to use Telegram"
            )
        secret = remit.services.secrets.get(WEBHOOK_SECRET)
        if secret is None:
            secret = secrets.token_urlsafe(32)
            remit.secrets.set(WEBHOOK_SECRET, secret, by=as_)
        bot = TelegramBot(stored_token(remit.services.secrets), api_base=api)
        try:
            bot.set_webhook(url, secret_token=secret)
        finally:
            bot.close()
    out.print(f"Telegram sends taps to {url}, signed with the secret {WEBHOOK_SECRET}")
