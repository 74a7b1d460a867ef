"""Connectors, and the two ways to implement them: a driver (the live service) and a fake.

A connector declares a vendor's ops. A `Driver` implements them against the vendor's API; a
`Fake` implements them in memory with state, for tests and demos. Both mark their methods with
`@implements(op)`, so remit can check when the app loads that every op has an implementation.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from remit.connectors.forges import Remote
from remit.connectors.redaction import call_secrets, redacted_output
from remit.core.errors import AppError, DriverError, InputInvalid, MissingCredential, TooLarge
from remit.core.limits import check_json
from remit.declare.ops import Op
from remit.declare.resources import ResourceType, check_contract_ops
from remit.declare.steps import StepSet

_OP_MARK = "__remit_op__"

F = TypeVar("F", bound=Callable[..., Any])


def implements(op: Op[Any, Any]) -> Callable[[F], F]:
    """Mark a driver or fake method as the implementation of `op`.

    The method is called as `method(self, input, call)` with the op's parsed input model and a
    `CallContext`, and returns an instance of the op's output model (or a dict that parses as
    one).
    """

    def mark(method: F) -> F:
        setattr(method, _OP_MARK, op.id)
        return method

    return mark


@dataclass(frozen=True)
class CallContext:
    """What an implementation knows about the call it is making.

    `idempotency_key` is stable across retries, crash recovery and later attempts of the same
    run: pass it to the vendor (e.g. Stripe's `Idempotency-Key` header). `timeout` is the
    seconds this try has before remit gives up on it: give the vendor's client a timeout
    within it (`httpx.Client(timeout=call.timeout)`), so the call ends rather than being left.
    """

    op: Op[Any, Any]
    idempotency_key: str
    run_id: str
    attempt: int
    actor: str
    environ: Mapping[str, str] = field(repr=False, default_factory=lambda: dict(os.environ))
    timeout: float = 120.0

    def credential(self, name: str) -> str:
        """The value of credential `name`, or `MissingCredential` naming it."""
        value = self.environ.get(name)
        if not value:
            raise MissingCredential.named(self.op.id, name)
        return value

    def ensure_secret(self, name: str, value: str) -> str:
        """Store `value` as remit's secret `name` unless one is stored, and return the value
        the secret holds after: `value`, or the one stored before (which the caller compares).
        Fails when the call has no secret store (its environment is not remit's credentials)."""
        store = getattr(self.environ, "secrets", None)
        if store is None:
            raise DriverError(
                f"op `{self.op.id}` stores the secret {name}, and this call has no secret "
                "store: call it through remit (a run, or `remit call`)",
                retryable=False,
            )
        held = store.get(name)
        if held is None:
            store.set(name, value, by=self.actor)
            return value
        return str(held)


class Implementation:
    """What drivers and fakes have in common: a table from op id to method."""

    _handlers: ClassVar[dict[str, str]] = {}
    # Called on the caller's thread, with no timeout of remit's (see `execution/tries.py`).
    inline: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                op_id = getattr(value, _OP_MARK, None)
                if isinstance(op_id, str):
                    handlers[op_id] = attr
        cls._handlers = handlers

    @classmethod
    def implemented(cls) -> frozenset[str]:
        return frozenset(cls._handlers)

    def needs(self, op_id: str) -> tuple[str, ...]:
        """The credentials a call of `op_id` cannot be made without: checked before it is made,
        and a missing one fails the call naming it. All the declared `credentials` unless a
        driver says less for one of its ops; every declared one is redacted from every call."""
        return tuple(getattr(self, "credentials", ()))

    def call_credentials(self, input: BaseModel) -> tuple[str, ...]:
        """The credentials one call names in its input, beside the declared ones: redacted
        from its answer and its errors as they are."""
        return ()

    def invoke(self, op: Op[Any, Any], input: BaseModel, call: CallContext) -> BaseModel:
        """Call the method that implements `op` and return its output as the op's model."""
        name = self._handlers.get(op.id)
        if name is None:
            raise AppError(f"{type(self).__name__} does not implement `{op.id}`")
        # Where the answer enters remit, secrets are redacted from it (`redaction.py`), and it
        # is checked against the limits (`answered`).
        named = [*getattr(self, "credentials", ()), *self.call_credentials(input)]
        secrets = call_secrets(call.environ, named)
        try:
            result = getattr(self, name)(input, call)
        except BaseException as error:  # SystemExit's text is stored too; re-raised as it is
            failure = secrets.exception(error)
        else:
            output = redacted_output(secrets, op, result)
            answered(op, output)
            return output
        raise failure


def answered(op: Op[Any, Any], output: BaseModel) -> None:
    """Refuse an op's output that remit cannot keep: past `REMIT_MAX_OP_BYTES`, or holding a
    NUL character. The call fails, not to be tried again; a write that cannot be repeated
    safely is asked about, since the vendor answered and so may have acted."""
    try:
        check_json(
            output.model_dump(mode="json"),
            what=f"the output of `{op.id}`",
            cap="op_bytes",
            target=op.id,
            after="have the driver return a reference to the data instead, or raise the limit",
        )
    except (TooLarge, InputInvalid) as refused:
        raise DriverError(
            f"op `{op.id}` answered output remit cannot keep: {refused}",
            retryable=False,
            maybe_applied=op.effect == "write",
            op=op.id,
        ) from None


class Driver(Implementation):
    """Implements a connector's ops against the live service.

    `credentials` lists the environment variables the driver needs; a call made while one is
    missing fails before reaching the vendor, with a message naming the variable.
    """

    credentials: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class AppliedEffect:
    """One write a fake applied: which op, under which idempotency key, with what."""

    op: str
    idempotency_key: str
    input: dict[str, Any]
    output: dict[str, Any]


class Fake(Implementation):
    """Implements a connector's ops in memory, for tests, scenarios and demos.

    Every write the fake applies is recorded in `effects` with its idempotency key. A write
    whose key the fake has seen returns the first result and applies nothing, as Stripe does.

    With a `journal` path the fake behaves as one vendor shared by every process that opens
    the same file: effects are appended to it (JSON lines), a write first reads what other
    processes applied, and check-and-apply holds an exclusive lock on the file. Its record
    survives a process that was killed, which is what crash tests read.
    """

    credentials: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, journal: Path | str | None = None) -> None:
        self.effects: list[AppliedEffect] = []
        self.calls: list[tuple[str, str]] = []
        self._results: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._journal = Path(journal) if journal is not None else None
        self._read_to = 0
        self._catch_up()

    def effects_of(self, op: Op[Any, Any] | str) -> list[AppliedEffect]:
        op_id = op if isinstance(op, str) else op.id
        return [effect for effect in self.effects if effect.op == op_id]

    def state(self) -> dict[str, Any]:
        """What the fake vendor holds, as JSON a person reads to see what a demo or a test did
        (`remit fakes show`). By default the writes it applied, in order; a fake that keeps
        state of its own (invoices, an outbox) says what it holds instead."""
        self._catch_up()
        with self._lock:
            return {"effects": [dict(effect.__dict__) for effect in self.effects]}

    def invoke(self, op: Op[Any, Any], input: BaseModel, call: CallContext) -> BaseModel:
        with self._lock:
            self.calls.append((op.id, call.idempotency_key))
            if op.effect != "write":
                key_lock = None
            else:
                key_lock = self._key_locks.setdefault(call.idempotency_key, threading.Lock())
        if key_lock is None:
            return super().invoke(op, input, call)
        # One write per key at a time: a second caller with the same key waits, then replays.
        with key_lock, self._vendor_lock():
            self._catch_up()
            if call.idempotency_key in self._results:
                replayed: BaseModel = op.output.model_validate(self._results[call.idempotency_key])
                return replayed
            output = super().invoke(op, input, call)
            self._record(
                AppliedEffect(
                    op=op.id,
                    idempotency_key=call.idempotency_key,
                    input=input.model_dump(mode="json"),
                    output=output.model_dump(mode="json"),
                )
            )
            return output

    def _record(self, effect: AppliedEffect) -> None:
        with self._lock:
            self.effects.append(effect)
            self._results[effect.idempotency_key] = effect.output
            if self._journal is not None:
                with self._journal.open("a+b") as journal:
                    if journal.tell() > 0:
                        journal.seek(journal.tell() - 1)
                        if journal.read(1) != b"\n":
                            journal.write(b"\n")  # end a line torn by a process killed mid-write
                    journal.write((json.dumps(effect.__dict__, sort_keys=True) + "\n").encode())
                    journal.flush()
                    os.fsync(journal.fileno())
                    self._read_to = journal.tell()

    @contextlib.contextmanager
    def _vendor_lock(self) -> Iterator[None]:
        """Across processes sharing the journal, one write is checked and applied at a time."""
        if self._journal is None:
            yield
            return
        with open(f"{self._journal}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _catch_up(self) -> None:
        """Read the effects other processes appended to the journal since the last read."""
        if self._journal is None or not self._journal.exists():
            return
        with self._lock, self._journal.open("rb") as journal:
            journal.seek(self._read_to)
            for raw in journal:
                if not raw.endswith(b"\n"):
                    break  # a line still being written, or torn by a process killed mid-write
                self._read_to += len(raw)
                try:
                    effect = AppliedEffect(**json.loads(raw))
                except (ValueError, TypeError):
                    continue
                self.effects.append(effect)
                self._results[effect.idempotency_key] = effect.output


@dataclass(frozen=True, eq=False)
class Connector:
    """A vendor's ops with their driver and fake, e.g. `Connector("payments", ops=[...], ...)`.

    `driver` and `fake` are called with no arguments to make an implementation. `fake` may be
    left out: such a connector runs on its driver only, and a worker, a harness or a demo on
    fakes refuses it, naming it. `resources` lists the vendor's resource types
    (`remit.resource_type`); their six ops each are added to `ops`. `steps` are the scenario
    steps the connector offers (`remit.steps`): givens that seed its fake through its ops,
    thens that read the fake. `remote` says which git repos the vendor hosts as a forge, and
    with what driver and fake (`Remote`), for remit's change workflow.
    """

    vendor: str
    ops: tuple[Op[Any, Any], ...]
    driver: Callable[[], Implementation]
    fake: Callable[[], Implementation] | None
    description: str = ""
    resources: tuple[ResourceType, ...] = ()
    steps: StepSet | None = None
    remote: Remote | None = None

    def __init__(
        self,
        vendor: str,
        *,
        ops: Iterable[Op[Any, Any]],
        driver: Callable[[], Implementation],
        fake: Callable[[], Implementation] | None = None,
        description: str = "",
        resources: Iterable[ResourceType] = (),
        steps: StepSet | None = None,
        remote: Remote | None = None,
    ) -> None:
        types = tuple(resources)
        for rtype in types:
            if not isinstance(rtype, ResourceType):
                raise AppError(
                    f"connector `{vendor}` lists {rtype!r} among its resources: declare each "
                    "with `remit.resource_type(...)`"
                )
        object.__setattr__(self, "vendor", vendor)
        object.__setattr__(
            self, "ops", (*ops, *(made for rtype in types for made in rtype.ops.values()))
        )
        object.__setattr__(self, "driver", driver)
        object.__setattr__(self, "fake", fake)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "resources", types)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "remote", remote)
        self._check()
        by_id = {declared.id: declared for declared in self.ops}
        for rtype in types:
            check_contract_ops(rtype, by_id)

    def _check(self) -> None:
        seen: set[str] = set()
        for declared in self.ops:
            if not isinstance(declared, Op):
                raise AppError(
                    f"connector `{self.vendor}` lists {declared!r} among its ops: "
                    "list `Op` objects made with `remit.op(...)`"
                )
            if declared.vendor != self.vendor:
                raise AppError(
                    f"connector `{self.vendor}` declares `{declared.id}`, whose vendor is "
                    f"`{declared.vendor}`: rename the op to `{self.vendor}.<resource>.<op>`"
                )
            if declared.id in seen:
                raise AppError(f"connector `{self.vendor}` declares `{declared.id}` twice")
            seen.add(declared.id)
        if self.steps is not None and (
            not isinstance(self.steps, StepSet) or self.steps.vendor != self.vendor
        ):
            raise AppError(
                f"connector `{self.vendor}` is given steps={self.steps!r}: declare them with "
                f"`remit.steps({self.vendor!r})`"
            )
        if self.remote is not None and not isinstance(self.remote, Remote):
            raise AppError(
                f"connector `{self.vendor}` is given remote={self.remote!r}: declare it with "
                "`Remote(urls=..., driver=..., fake=...)`"
            )
        for role, factory in (("driver", self.driver), ("fake", self.fake)):
            if factory is None:
                continue
            implemented = getattr(factory, "implemented", None)
            if implemented is None:
                continue
            missing = sorted(seen - implemented())
            if missing:
                raise AppError(
                    f"connector `{self.vendor}`: its {role} {getattr(factory, '__name__', factory)} "
                    f"does not implement {', '.join(f'`{m}`' for m in missing)}: add a method "
                    "marked `@implements(op)` for each"
                )
