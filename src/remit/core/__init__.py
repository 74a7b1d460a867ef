"""The core every feature builds on: runs and their fence, the ledger, the outbox, errors, the clock, settings and the database."""
