Feature: Writing off an invoice
  A balance the customer will not pay is written off with a credit note, once a person
  approves it. A clerk may approve a write-off of up to 500.00; a larger one needs a
  controller, who may also lower the amount.

  Background:
    Given it is 2026-11-29 09:00 UTC
    And an invoice inv_2003 of 612.50 EUR due 2026-06-30 for finance@fabrikam.example

  Scenario: A write-off over the clerk's limit needs the controller
    When ann starts write-off as $writeoff with:
      | invoice_id | inv_2003                  |
      | reason     | customer in administration |
    Then $writeoff is waiting
    And the gate of $writeoff has the draft:
      | amount   | 61250 |
      | currency | eur   |
    When ann approves $writeoff
    Then it is refused because may not decide
    When carol approves $writeoff with:
      | amount | 50000                                  |
      | memo   | settled 500.00 with the administrator |
    Then $writeoff is done
    And the gate of $writeoff was decided by carol
    And the output of $writeoff is:
      | outcome | written off |
      | amount  | 50000       |
    And invoice inv_2003 has a credit note of 500.00 EUR
    And the last email to finance@fabrikam.example says "credited"

  Scenario: A clerk may reject a write-off
    When ann starts write-off as $writeoff with:
      | invoice_id | inv_2003 |
    And ann rejects $writeoff because the customer paid after all
    Then $writeoff is done
    And the gate of $writeoff is rejected
    And the output of $writeoff is:
      | outcome | not written off (rejected) |
    And invoice inv_2003 is open
    And finance@fabrikam.example got 0 emails

  Scenario: A write-off nobody decides lapses after a week
    When ann starts write-off as $writeoff with:
      | invoice_id | inv_2003 |
    And 8 days pass
    Then the gate of $writeoff is expired
    And the output of $writeoff is:
      | outcome | not written off (expired) |
