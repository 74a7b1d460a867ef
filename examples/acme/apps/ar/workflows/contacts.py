"""The desk's record of each customer's accounts-payable contact: how often it was chased.

Kept in the repo's own database as the collection `ar.contacts`: `remit data ar.contacts get
ap@northwind.example` reads one.
"""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel

from remit import collection


class Contact(BaseModel):
    """A customer's accounts-payable contact, and how often the desk chased it."""

    email: str
    reminders: int = 0
    last_chased: date | None = None
    note: str = ""


contacts = collection("contacts", model=Contact, key="email")
