"""Fakes: writes recorded once per idempotency key, reads recorded as calls only, a journal."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from remit import AppError, CallContext, Fake, MissingCredential, Op, implements, op


class AccountRef(BaseModel):
    account: str


class Balance(BaseModel):
    account: str
    cents: int


class Transfer(BaseModel):
    account: str
    cents: int


class Receipt(BaseModel):
    receipt_id: str
    balance_cents: int


get_balance = op("bank.accounts.get", effect="read", input=AccountRef, output=Balance)
deposit = op("bank.accounts.deposit", effect="write", input=Transfer, output=Receipt)
close_account = op("bank.accounts.close", effect="write", input=AccountRef, output=Balance)


class BankFake(Fake):
    """Keeps balances; each deposit that is applied gets the next receipt number."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.balances: dict[str, int] = {}
        self.applied = 0

    @implements(get_balance)
    def get(self, input: AccountRef, call: CallContext) -> Balance:
        return Balance(account=input.account, cents=self.balances.get(input.account, 0))

    @implements(deposit)
    def make_deposit(self, input: Transfer, call: CallContext) -> dict[str, object]:
        self.applied += 1
        self.balances[input.account] = self.balances.get(input.account, 0) + input.cents
        return {"receipt_id": f"rcpt_{self.applied}", "balance_cents": self.balances[input.account]}


def call_for(which: Op[BaseModel, BaseModel], key: str, **environ: str) -> CallContext:
    return CallContext(
        op=which, idempotency_key=key, run_id="run_1", attempt=1, actor="test", environ=environ
    )


def test_a_write_applies_and_is_recorded() -> None:
    fake = BankFake()

    receipt = fake.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))

    assert receipt == Receipt(receipt_id="rcpt_1", balance_cents=500)
    assert fake.balances == {"a": 500}
    assert len(fake.effects) == 1
    effect = fake.effects[0]
    assert effect.op == "bank.accounts.deposit"
    assert effect.idempotency_key == "k1"
    assert effect.input == {"account": "a", "cents": 500}
    assert effect.output == {"receipt_id": "rcpt_1", "balance_cents": 500}


def test_a_write_with_a_seen_key_returns_the_first_result_and_applies_nothing() -> None:
    fake = BankFake()
    first = fake.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))

    again = fake.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))

    assert again == first
    assert isinstance(again, Receipt)
    assert fake.applied == 1
    assert fake.balances == {"a": 500}
    assert len(fake.effects) == 1
    assert fake.calls == [("bank.accounts.deposit", "k1"), ("bank.accounts.deposit", "k1")]


def test_writes_with_different_keys_both_apply() -> None:
    fake = BankFake()
    fake.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))

    second = fake.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k2"))

    assert second == Receipt(receipt_id="rcpt_2", balance_cents=1000)
    assert [e.idempotency_key for e in fake.effects] == ["k1", "k2"]


def test_reads_are_calls_but_not_effects() -> None:
    fake = BankFake()
    fake.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))

    first = fake.invoke(get_balance, AccountRef(account="a"), call_for(get_balance, "r1"))
    fake.balances["a"] = 900
    second = fake.invoke(get_balance, AccountRef(account="a"), call_for(get_balance, "r1"))

    # A read with a repeated key is not deduplicated: it reads the state as it is now.
    assert first == Balance(account="a", cents=500)
    assert second == Balance(account="a", cents=900)
    assert [e.op for e in fake.effects] == ["bank.accounts.deposit"]
    assert fake.effects_of(get_balance) == []
    assert fake.effects_of("bank.accounts.deposit") == fake.effects_of(deposit)
    assert fake.calls[-2:] == [("bank.accounts.get", "r1"), ("bank.accounts.get", "r1")]


def test_an_op_the_fake_does_not_implement_fails_and_records_nothing() -> None:
    fake = BankFake()

    with pytest.raises(
        AppError, match=re.escape("BankFake does not implement `bank.accounts.close`")
    ):
        fake.invoke(close_account, AccountRef(account="a"), call_for(close_account, "c1"))

    assert fake.effects == []


def test_a_journal_survives_into_a_second_fake(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    first = BankFake(journal=journal)
    receipt = first.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))
    first.invoke(get_balance, AccountRef(account="a"), call_for(get_balance, "r1"))

    lines = journal.read_text().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["idempotency_key"] == "k1"

    second = BankFake(journal=journal)

    assert second.effects == first.effects
    again = second.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))
    assert again == receipt
    assert second.applied == 0
    assert len(second.effects) == 1
    assert len(journal.read_text().splitlines()) == 1

    new = second.invoke(deposit, Transfer(account="b", cents=7), call_for(deposit, "k2"))
    assert new == Receipt(receipt_id="rcpt_1", balance_cents=7)
    third = BankFake(journal=journal)
    assert [e.idempotency_key for e in third.effects] == ["k1", "k2"]


def test_a_journal_that_does_not_exist_yet_starts_empty(tmp_path: Path) -> None:
    fake = BankFake(journal=tmp_path / "j.jsonl")

    assert fake.effects == []
    assert not (tmp_path / "j.jsonl").exists()


def test_concurrent_writes_with_one_key_apply_once() -> None:
    """Two calls with one key at the same time (a recovered step racing the original)."""
    both_inside = threading.Barrier(2)

    class SlowBank(BankFake):
        @implements(deposit)
        def make_deposit(self, input: Transfer, call: CallContext) -> dict[str, object]:
            # Wait for the other call to get here too; if the fake lets only one call with
            # a key in at a time, the barrier breaks after the timeout and this one goes on.
            with contextlib.suppress(threading.BrokenBarrierError):
                both_inside.wait(timeout=1.0)
            return super().make_deposit(input, call)

    fake = SlowBank()
    results: list[BaseModel] = []

    def make_call() -> None:
        results.append(
            fake.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))
        )

    threads = [threading.Thread(target=make_call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert len(results) == 2
    assert results[0] == results[1]
    assert fake.applied == 1
    assert fake.balances == {"a": 500}
    assert len(fake.effects) == 1


def test_credential_returns_the_variable() -> None:
    call = call_for(deposit, "k1", BANK_API_KEY="sk_test_1")

    assert call.credential("BANK_API_KEY") == "sk_test_1"


@pytest.mark.parametrize("environ", [{}, {"BANK_API_KEY": ""}, {"OTHER_KEY": "x"}])
def test_credential_raises_missing_credential_naming_the_variable(
    environ: dict[str, str],
) -> None:
    call = call_for(deposit, "k1", **environ)

    with pytest.raises(MissingCredential) as raised:
        call.credential("BANK_API_KEY")

    error = raised.value
    assert error.variable == "BANK_API_KEY"
    assert error.op == "bank.accounts.deposit"
    assert error.retryable is False
    assert "op `bank.accounts.deposit` needs the credential `BANK_API_KEY`" in str(error)
    assert "set the environment variable BANK_API_KEY" in str(error)


def test_fakes_sharing_a_journal_act_as_one_vendor(tmp_path: Path) -> None:
    journal = tmp_path / "vendor.jsonl"
    first, second = BankFake(journal=journal), BankFake(journal=journal)

    one = first.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))
    again = second.invoke(deposit, Transfer(account="a", cents=500), call_for(deposit, "k1"))

    assert again == one  # the second process saw the first one's write and replayed it
    assert second.applied == 0
    assert [e.idempotency_key for e in second.effects] == ["k1"]


def test_a_journal_line_torn_by_a_killed_process_loses_no_later_effect(tmp_path: Path) -> None:
    journal = tmp_path / "vendor.jsonl"
    BankFake(journal=journal).invoke(
        deposit, Transfer(account="a", cents=1), call_for(deposit, "k1")
    )
    with journal.open("ab") as torn:
        torn.write(b'{"op": "bank.accounts.dep')  # killed mid-write
    BankFake(journal=journal).invoke(
        deposit, Transfer(account="a", cents=2), call_for(deposit, "k2")
    )

    assert [e.idempotency_key for e in BankFake(journal=journal).effects] == ["k1", "k2"]
