"""What an app declares: ops, connectors, workflows, queues and the app, and their checks."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from remit import (
    App,
    AppError,
    CallContext,
    Connector,
    Driver,
    Fake,
    InputInvalid,
    Queue,
    UnknownWorkflow,
    Workflow,
    implements,
    op,
    workflow,
)
from remit.connectors.apps import list_apps
from remit.connectors.wakeup import wakeup_connector
from remit.core.runs import attempt_workflow_id, parse_input

LOWERCASE = "lowercase letters, digits and dashes"


class InvoiceRef(BaseModel):
    invoice_id: str


class Invoice(BaseModel):
    invoice_id: str
    amount_cents: int


class Reminder(BaseModel):
    invoice_id: str
    email: str


class Sent(BaseModel):
    message_id: str


class ChaseInput(BaseModel):
    invoice_id: str
    days_overdue: int


get_invoice = op("payments.invoices.get", effect="read", input=InvoiceRef, output=Invoice)
send_reminder = op(
    "mail.messages.send", effect="write", input=Reminder, output=Sent, idempotent=True
)


class PaymentsFake(Fake):
    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        return Invoice(invoice_id=input.invoice_id, amount_cents=100)


class PaymentsDriver(Driver):
    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        raise NotImplementedError


class MailFake(Fake):
    @implements(send_reminder)
    def send(self, input: Reminder, call: CallContext) -> Sent:
        return Sent(message_id=f"msg_{call.idempotency_key}")


class MailDriver(Driver):
    @implements(send_reminder)
    def send(self, input: Reminder, call: CallContext) -> Sent:
        raise NotImplementedError


payments = Connector("payments", ops=[get_invoice], driver=PaymentsDriver, fake=PaymentsFake)
mail = Connector("mail", ops=[send_reminder], driver=MailDriver, fake=MailFake)


def chase_workflow(name: str = "chase-invoice", **kwargs: Any) -> Workflow:
    @workflow(name=name, input=ChaseInput, **kwargs)
    def chase(ctx: Any, input: ChaseInput) -> None:
        return None

    return chase


# --- ops ---------------------------------------------------------------------------------


def test_op_parts() -> None:
    assert get_invoice.vendor == "payments"
    assert get_invoice.resource == "invoices"
    assert get_invoice.name == "get"
    assert get_invoice.safe_to_repeat
    assert send_reminder.safe_to_repeat
    charge = op("payments.charges.create", effect="write", input=InvoiceRef, output=Invoice)
    assert not charge.safe_to_repeat


@pytest.mark.parametrize(
    "bad_id",
    [
        "payments.invoices",
        "payments.invoices.get.more",
        "Payments.invoices.get",
        "payments.invoices.get-one",
        "1payments.invoices.get",
        "payments..get",
        "",
    ],
)
def test_op_refuses_a_bad_id(bad_id: str) -> None:
    with pytest.raises(AppError) as raised:
        op(bad_id, effect="read", input=InvoiceRef, output=Invoice)

    message = str(raised.value)
    assert f"op id `{bad_id}`" in message
    assert "`<vendor>.<resource>.<op>`" in message
    assert "lowercase letters, digits and underscores" in message


def test_op_refuses_an_id_with_a_trailing_newline() -> None:
    # `$` in the id pattern also matches before a final newline.
    with pytest.raises(AppError, match=re.escape("must be `<vendor>.<resource>.<op>`")):
        op("payments.invoices.get\n", effect="read", input=InvoiceRef, output=Invoice)


def test_op_refuses_a_bad_effect() -> None:
    with pytest.raises(AppError) as raised:
        op("payments.invoices.get", effect="delete", input=InvoiceRef, output=Invoice)  # type: ignore[arg-type]

    message = str(raised.value)
    assert "op `payments.invoices.get` has effect `delete`" in message
    assert "use `read` or `write`" in message


@pytest.mark.parametrize("which", ["input", "output"])
@pytest.mark.parametrize("not_a_model", [dict, str, InvoiceRef(invoice_id="x"), None])
def test_op_refuses_input_or_output_that_is_not_a_model_class(which: str, not_a_model: Any) -> None:
    models: dict[str, Any] = {"input": InvoiceRef, "output": Invoice, which: not_a_model}

    with pytest.raises(AppError) as raised:
        op("payments.invoices.get", effect="read", **models)

    assert str(raised.value) == (
        f"op `payments.invoices.get`: its {which} must be a pydantic model class"
    )


def test_op_declares_what_not_done_means() -> None:
    send = op("payments.refunds.create", effect="write", input=InvoiceRef, output=Invoice)
    again = op(
        "payments.refunds.create",
        effect="write",
        input=InvoiceRef,
        output=Invoice,
        on_not_done="retry",
    )
    assert (send.on_not_done, again.on_not_done) == ("fail", "retry")

    with pytest.raises(AppError) as unknown:
        op(
            "payments.refunds.create",
            effect="write",
            input=InvoiceRef,
            output=Invoice,
            on_not_done="redo",  # type: ignore[arg-type]
        )
    assert "has on_not_done='redo': use \"retry\"" in str(unknown.value)
    with pytest.raises(AppError) as read:
        op(
            "payments.invoices.get",
            effect="read",
            input=InvoiceRef,
            output=Invoice,
            on_not_done="retry",
        )
    assert "is a read, whose outcome is never unknown" in str(read.value)


# --- connectors --------------------------------------------------------------------------


def test_connector_refuses_an_op_of_another_vendor() -> None:
    with pytest.raises(AppError) as raised:
        Connector("billing", ops=[get_invoice], driver=PaymentsDriver, fake=PaymentsFake)

    message = str(raised.value)
    assert "connector `billing` declares `payments.invoices.get`" in message
    assert "whose vendor is `payments`" in message
    assert "`billing.<resource>.<op>`" in message


def test_connector_refuses_an_op_declared_twice() -> None:
    with pytest.raises(AppError) as raised:
        Connector(
            "payments", ops=[get_invoice, get_invoice], driver=PaymentsDriver, fake=PaymentsFake
        )

    assert str(raised.value) == "connector `payments` declares `payments.invoices.get` twice"


def test_connector_refuses_something_that_is_not_an_op() -> None:
    with pytest.raises(
        AppError, match=re.escape("connector `payments` lists 'payments.invoices.get'")
    ):
        Connector(
            "payments",
            ops=["payments.invoices.get"],  # type: ignore[list-item]
            driver=PaymentsDriver,
            fake=PaymentsFake,
        )


list_invoices = op("payments.invoices.list", effect="read", input=InvoiceRef, output=Invoice)


def test_connector_names_the_op_its_fake_misses() -> None:
    with pytest.raises(AppError) as raised:
        Connector(
            "payments",
            ops=[get_invoice, list_invoices],
            driver=PaymentsDriver,
            fake=PaymentsFake,
        )

    message = str(raised.value)
    # The driver also misses the op; the first role checked is named.
    assert "connector `payments`: its driver PaymentsDriver" in message
    assert "does not implement `payments.invoices.list`" in message
    assert "`payments.invoices.get`" not in message
    assert "@implements(op)" in message


def test_connector_names_the_op_its_fake_misses_when_the_driver_is_complete() -> None:
    class FullDriver(Driver):
        @implements(get_invoice)
        def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
            raise NotImplementedError

        @implements(list_invoices)
        def list(self, input: InvoiceRef, call: CallContext) -> Invoice:
            raise NotImplementedError

    with pytest.raises(AppError) as raised:
        Connector(
            "payments", ops=[get_invoice, list_invoices], driver=FullDriver, fake=PaymentsFake
        )

    message = str(raised.value)
    assert "its fake PaymentsFake does not implement `payments.invoices.list`" in message


def test_connector_names_every_missing_op() -> None:
    class EmptyDriver(Driver):
        pass

    with pytest.raises(AppError) as raised:
        Connector(
            "payments", ops=[list_invoices, get_invoice], driver=EmptyDriver, fake=PaymentsFake
        )

    assert (
        "its driver EmptyDriver does not implement `payments.invoices.get`, "
        "`payments.invoices.list`"
    ) in str(raised.value)


def test_connector_keeps_its_ops_and_implementations_know_theirs() -> None:
    assert payments.ops == (get_invoice,)
    assert PaymentsFake.implemented() == frozenset({"payments.invoices.get"})
    assert MailDriver.implemented() == frozenset({"mail.messages.send"})
    assert Fake.implemented() == frozenset()


# --- workflows ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_name", ["Chase_Invoice", "1abc", "", "chase invoice", "-chase", "chase_invoice"]
)
def test_workflow_refuses_a_bad_name(bad_name: str) -> None:
    with pytest.raises(AppError) as raised:
        workflow(name=bad_name, input=ChaseInput)

    message = str(raised.value)
    assert f"workflow name `{bad_name}`" in message
    assert LOWERCASE in message


@pytest.mark.parametrize(
    ("bad_name", "suggestion"),
    [("Chase_Invoice", "chase-invoice"), ("1abc", "w-1abc"), ("", "my-name")],
)
def test_workflow_name_error_suggests_a_name(bad_name: str, suggestion: str) -> None:
    with pytest.raises(AppError) as raised:
        workflow(name=bad_name, input=ChaseInput)

    assert f"for example `{suggestion}`" in str(raised.value)


def test_workflow_refuses_a_name_with_a_trailing_newline() -> None:
    # `$` in the name pattern also matches before a final newline.
    with pytest.raises(AppError, match=LOWERCASE):
        workflow(name="chase-invoice\n", input=ChaseInput)


def test_workflow_accepts_a_good_name() -> None:
    wf = chase_workflow("chase-invoice-2", uses=[get_invoice])

    assert isinstance(wf, Workflow)
    assert wf.name == "chase-invoice-2"
    assert wf.queue == "default"
    assert wf.op_ids == frozenset({"payments.invoices.get"})
    assert not wf.is_async


def test_workflow_knows_an_async_function() -> None:
    @workflow(name="async-one", input=ChaseInput)
    async def run(ctx: Any, input: ChaseInput) -> None:
        return None

    assert run.is_async


def test_workflow_refuses_an_input_that_is_not_a_model() -> None:
    with pytest.raises(AppError) as raised:
        workflow(name="chase-invoice", input=dict)  # type: ignore[arg-type]

    assert "workflow `chase-invoice`: `input` must be a pydantic model class" in str(raised.value)


def test_workflow_refuses_uses_that_are_not_ops() -> None:
    with pytest.raises(AppError) as raised:
        workflow(name="chase-invoice", input=ChaseInput, uses=["payments.invoices.get"])  # type: ignore[list-item]

    assert "workflow `chase-invoice` lists 'payments.invoices.get' in `uses`" in str(raised.value)


def test_workflow_refuses_a_bad_queue_name() -> None:
    with pytest.raises(AppError) as raised:
        workflow(name="chase-invoice", input=ChaseInput, queue="Slow_Queue")

    assert "queue name `Slow_Queue`" in str(raised.value)
    assert LOWERCASE in str(raised.value)


def test_queue_checks() -> None:
    with pytest.raises(AppError, match="queue name `Bad Queue`"):
        Queue("Bad Queue")
    with pytest.raises(AppError) as raised:
        Queue("slow", worker_concurrency=0)
    assert str(raised.value) == "queue `slow`: worker_concurrency must be 1 or more, or None"
    assert Queue("slow", concurrency=1).concurrency == 1


# --- the app -----------------------------------------------------------------------------


def test_app_collects_workflows_connectors_and_queues() -> None:
    wf = chase_workflow(uses=[get_invoice, send_reminder], queue="slow")

    app = App(
        name="ar-desk", workflows=[wf], connectors=[payments, mail], queues=[Queue("slow", 2)]
    )

    assert app.workflow("chase-invoice") is wf
    assert set(app.connectors) == {"payments", "mail", "wakeup", "remit"}
    assert app.ops == {
        "payments.invoices.get": get_invoice,
        "mail.messages.send": send_reminder,
        **{o.id: o for o in wakeup_connector.ops},
        list_apps.id: list_apps,
    }
    assert set(app.queues) == {"default", "slow"}
    assert app.queues["slow"].concurrency == 2


def test_app_refuses_a_bad_name() -> None:
    with pytest.raises(AppError, match=f"app name `AR Desk` must be {LOWERCASE}"):
        App(name="AR Desk", workflows=[])


def test_app_names_the_known_workflows_when_one_is_unknown() -> None:
    app = App(name="ar-desk", workflows=[chase_workflow()])

    with pytest.raises(UnknownWorkflow) as raised:
        app.workflow("chase")

    assert str(raised.value) == "app `ar-desk` has no workflow `chase` (it has: chase-invoice)"


def test_app_refuses_two_workflows_with_one_name() -> None:
    first = chase_workflow()
    second = chase_workflow()

    with pytest.raises(AppError) as raised:
        App(name="ar-desk", workflows=[first, second])

    message = str(raised.value)
    assert "app `ar-desk` has two workflows named `chase-invoice`" in message
    assert "rename one" in message
    assert f"{__name__}.chase_workflow.<locals>.chase" in message


def test_app_refuses_an_op_no_connector_declares() -> None:
    wf = chase_workflow(uses=[get_invoice, send_reminder])

    with pytest.raises(AppError) as raised:
        App(name="ar-desk", workflows=[wf], connectors=[payments])

    message = str(raised.value)
    assert "workflow `chase-invoice`" in message
    assert "`mail.messages.send`" in message
    assert "no connector in the app declares" in message
    assert "add the mail connector to `App(connectors=...)`" in message


def test_app_refuses_an_op_that_is_a_copy_of_the_declared_one() -> None:
    copy = op("payments.invoices.get", effect="read", input=InvoiceRef, output=Invoice)
    wf = chase_workflow(uses=[copy])

    with pytest.raises(AppError) as raised:
        App(name="ar-desk", workflows=[wf], connectors=[payments])

    assert "import the op from the connector" in str(raised.value)


def test_app_refuses_a_workflow_on_an_undeclared_queue() -> None:
    wf = chase_workflow(queue="slow")

    with pytest.raises(AppError) as raised:
        App(name="ar-desk", workflows=[wf])

    message = str(raised.value)
    assert "workflow `chase-invoice` runs on queue `slow`" in message
    assert "add `Queue('slow')` to `App(queues=...)`" in message


def test_app_refuses_two_connectors_for_one_vendor() -> None:
    again = Connector("payments", ops=[get_invoice], driver=PaymentsDriver, fake=PaymentsFake)

    with pytest.raises(AppError) as raised:
        App(name="ar-desk", workflows=[], connectors=[payments, again])

    assert str(raised.value) == (
        "app `ar-desk` has two connectors for the vendor `payments`: keep one"
    )


def test_app_refuses_a_function_that_is_not_a_workflow() -> None:
    def chase(ctx: Any, input: ChaseInput) -> None:
        return None

    with pytest.raises(
        AppError, match=r"decorate it with `@workflow\(name=\.\.\., input=\.\.\.\)`"
    ):
        App(name="ar-desk", workflows=[chase])  # type: ignore[list-item]


def test_app_refuses_a_connector_that_is_not_a_connector() -> None:
    with pytest.raises(AppError, match="app `ar-desk` lists 'payments' among its connectors"):
        App(name="ar-desk", workflows=[], connectors=["payments"])  # type: ignore[list-item]


# --- the app's version --------------------------------------------------------------------


@workflow(name="chase-invoice", input=ChaseInput)
def chase_v1(ctx: Any, input: ChaseInput) -> str:
    return "reminded"


@workflow(name="chase-invoice", input=ChaseInput)
def chase_v2(ctx: Any, input: ChaseInput) -> str:
    return "reminded twice"


@workflow(name="close-invoice", input=ChaseInput)
def close(ctx: Any, input: ChaseInput) -> str:
    return "closed"


def test_version_changes_when_a_workflow_function_changes() -> None:
    one = App(name="ar-desk", workflows=[chase_v1, close])
    two = App(name="ar-desk", workflows=[chase_v2, close])

    assert one.version != two.version


def test_version_is_stable_otherwise() -> None:
    one = App(name="ar-desk", workflows=[chase_v1, close])
    again = App(name="ar-desk", workflows=[close, chase_v1], connectors=[payments, mail])

    assert again.version == one.version
    assert len(one.version) == 16
    assert int(one.version, 16) >= 0


def test_version_changes_when_a_workflow_is_added() -> None:
    assert App(name="ar-desk", workflows=[chase_v1]).version != (
        App(name="ar-desk", workflows=[chase_v1, close]).version
    )


# --- a run's input -------------------------------------------------------------------------


def test_parse_input_returns_the_input_as_json() -> None:
    wf = chase_workflow()

    assert parse_input(wf, {"invoice_id": "inv_1", "days_overdue": "3"}) == {
        "invoice_id": "inv_1",
        "days_overdue": 3,
    }
    assert parse_input(wf, ChaseInput(invoice_id="inv_2", days_overdue=1)) == {
        "invoice_id": "inv_2",
        "days_overdue": 1,
    }


def test_parse_input_names_the_workflow_and_the_field() -> None:
    wf = chase_workflow()

    with pytest.raises(InputInvalid) as raised:
        parse_input(wf, {"invoice_id": "inv_1", "days_overdue": "soon"})

    error = raised.value
    message = str(error)
    assert "input to workflow `chase-invoice` does not parse" in message
    assert "days_overdue:" in message
    assert "nothing was written" in message
    assert "invoice_id" not in message
    assert error.target == "chase-invoice"
    assert [e["loc"] for e in error.errors] == [["days_overdue"]]


def test_parse_input_names_a_missing_field() -> None:
    wf = chase_workflow()

    with pytest.raises(InputInvalid) as raised:
        parse_input(wf, {"days_overdue": 3})

    assert "invoice_id: Field required" in str(raised.value)
    assert raised.value.errors[0]["type"] == "missing"


def test_attempt_workflow_id() -> None:
    assert attempt_workflow_id("run_abc", 1) == "run_abc:1"
    assert attempt_workflow_id("run_abc", 2) != attempt_workflow_id("run_abc", 1)


# --- ops the workflow's code calls without listing them ------------------------------------


class _Ref(BaseModel):
    id: str


_read = op("acme.things.read", effect="read", input=_Ref, output=_Ref)
_write = op("acme.things.write", effect="write", input=_Ref, output=_Ref)


class _AcmeFake(Fake):
    @implements(_read)
    def read(self, input: _Ref, call: CallContext) -> _Ref:
        return input

    @implements(_write)
    def write(self, input: _Ref, call: CallContext) -> _Ref:
        return input


_acme = Connector("acme", ops=[_read, _write], driver=_AcmeFake, fake=_AcmeFake)


def test_an_op_named_in_the_code_but_not_in_uses_is_refused_at_load() -> None:
    @workflow(name="by-name", input=_Ref, uses=[_read])
    def by_name(ctx: Any, input: _Ref) -> None:
        ctx.call(_read, id=input.id)
        ctx.call(_write, id=input.id)

    with pytest.raises(AppError) as refused:
        App(name="acme", workflows=[by_name], connectors=[_acme])
    assert str(refused.value) == (
        "workflow `by-name` calls `acme.things.write`, which its `uses` does not list: "
        "add it to @workflow(uses=[...])"
    )


def test_an_attribute_path_inside_a_lambda_is_refused_at_load() -> None:
    @workflow(name="by-path", input=_Ref)
    def by_path(ctx: Any, input: _Ref) -> None:
        ctx.step("later", lambda: ctx.acme.things.write(id=input.id))

    with pytest.raises(AppError, match=re.escape("`by-path` calls `acme.things.write`")):
        App(name="acme", workflows=[by_path], connectors=[_acme])


def test_listed_ops_and_unrelated_attributes_pass() -> None:
    things = {"a": 1}

    @workflow(name="fine", input=_Ref, uses=[_read, _write])
    def fine(ctx: Any, input: _Ref) -> None:
        ctx.acme.things.read(id=input.id)
        ctx.call(_write, id=input.id)
        things.get("a")

    app = App(name="acme", workflows=[fine], connectors=[_acme])
    assert app.workflow("fine").op_ids == {"acme.things.read", "acme.things.write"}


def test_a_workflow_function_must_take_ctx_and_input() -> None:
    with pytest.raises(AppError) as refused:

        @workflow(name="no-input", input=_Ref)
        def no_input(ctx: Any) -> None:
            return None

    assert "workflow `no-input`" in str(refused.value)
    assert "must take two arguments, `(ctx, input)`" in str(refused.value)


def test_names_that_merely_match_an_op_do_not_count() -> None:
    @workflow(name="lookalike", input=_Ref, uses=[_read])
    def lookalike(ctx: Any, input: _Ref) -> None:
        flags = SimpleNamespace(_write=True)
        if flags._write:  # an attribute named like the module's `_write` op is not a call
            _write = ctx.call(_read, id=input.id)  # nor is a local of that name
            ctx.step("later", lambda: _write.id)

    app = App(name="acme", workflows=[lookalike], connectors=[_acme])
    assert app.workflow("lookalike").op_ids == {"acme.things.read"}
