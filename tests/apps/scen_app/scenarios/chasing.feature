Feature: Chasing an overdue invoice
  The desk reminds a customer of an invoice past its due date, and again a month later.

  Background:
    Given it is 2026-11-29 09:00 UTC
    And an invoice inv_1 of 1200 due 2026-10-01

  Scenario: A clerk chases an overdue invoice
    When ann starts chase as $chase with:
      | field      | value               |
      | invoice_id | $invoice.invoice_id |
    Then $chase is done
    And the output of $chase is:
      | field      | value |
      | invoice_id | inv_1 |
      | reminders  | 1     |
    And the ledger of $chase is:
      | op                    | status |
      | books.invoices.get    | ok     |
      | llm.chat.complete     | ok     |
      | books.invoices.remind | ok     |
    And the invoice inv_1 has 1 reminders
    And the app has spent at most 0.01 USD this month

  Scenario: Someone outside the desk may not chase
    When bob starts chase with:
      | invoice_id | inv_1 |
    Then it is refused because user:bob

  Scenario: A month asleep, then a second reminder
    When ann starts follow-up as $follow with:
      """
      {"invoice_id": "$invoice.invoice_id", "days": 30}
      """
    Then $follow is sleeping
    When 29 days pass
    Then $follow is sleeping
    When 1 day passes
    Then $follow is done
    And the output of $follow is:
      | reminders | 1 |
    And the invoice inv_1 has 1 reminders
