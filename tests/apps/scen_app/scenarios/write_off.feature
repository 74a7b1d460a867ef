Feature: Writing off an invoice
  A write-off waits for a person's approval; a clerk may approve up to 500.

  Background:
    Given it is 2026-11-29 09:00 UTC
    And an invoice inv_7 of 1200 due 2026-09-01 as $big
    And an invoice inv_8 of 300 due 2026-09-01 as $small

  Scenario: A controller approves a write-off with a smaller amount
    When ann starts write-off as $writeoff with:
      | invoice_id | $big.invoice_id |
    Then $writeoff is waiting
    And the gate of $writeoff is pending
    And the gate of $writeoff has the draft:
      | invoice_id | inv_7 |
      | amount     | 1200  |
    When carol approves $writeoff with:
      | amount | 1000 |
    Then $writeoff is done
    And the gate of $writeoff was decided by carol
    And the gate of $writeoff has the draft:
      | amount | 1000 |
    And the output of $writeoff is:
      """
      {"outcome": "written off", "amount": 1000}
      """
    And the invoice inv_7 is written off

  Scenario: A clerk may not approve a large write-off, and may reject it
    When ann starts write-off as $writeoff with:
      | invoice_id | inv_7 |
    And ann approves $writeoff
    Then it is refused because may not decide
    When ann rejects $writeoff because the customer paid
    Then $writeoff is done
    And the gate of $writeoff is rejected
    And the output of $writeoff is:
      | outcome | not written off (rejected) |
    And the invoice inv_7 is open

  Scenario: Whoever asked for a write-off withdraws it, and no one else may
    When ann starts write-off as $writeoff with:
      | invoice_id | inv_7 |
    And carol withdraws $writeoff
    Then it is refused because only they or an admin (REMIT_ADMINS) may withdraw it
    When ann withdraws $writeoff because the customer paid
    Then $writeoff is done
    And the gate of $writeoff is withdrawn
    And the gate of $writeoff was decided by ann
    And the output of $writeoff is:
      | outcome | not written off (withdrawn) |
    And the invoice inv_7 is open

  Scenario: A clerk approves a small write-off
    When ann starts write-off as $writeoff with:
      | invoice_id | $small.invoice_id |
    And ann approves $writeoff
    Then $writeoff is done
    And the output of $writeoff is:
      | amount | 300 |

  Scenario: A gate nobody decides expires after a week
    When ann starts write-off as $writeoff with:
      | invoice_id | inv_7 |
    And 8 days pass
    Then the gate of $writeoff is expired
    And $writeoff is done
    And the output of $writeoff is:
      | outcome | not written off (expired) |
