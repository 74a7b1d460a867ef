"""Budgets: the limits an app declares, and the store that reserves and bills against them."""
