Feature: Chasing an overdue invoice
  When a customer has not paid an invoice by its due date, a clerk chases it: the customer
  gets an email, firmer the later the invoice is, and the invoice counts the reminder.

  Background:
    Given it is 2026-11-29 09:00 UTC
    And an invoice inv_2001 of 1,280.00 EUR due 2026-11-01 for ap@northwind.example

  Scenario: A clerk chases an invoice four weeks overdue
    When ann starts chase-invoice as $chase with:
      | invoice_id | inv_2001 |
    Then $chase is done
    And the output of $chase is:
      | outcome      | firm reminder sent |
      | days_overdue | 28                 |
    And ap@northwind.example got 1 email
    And the last email to ap@northwind.example says "Please arrange payment this week."
    And invoice inv_2001 has 1 reminder
    And the app has spent at most 0.01 USD this month

  Scenario: A paid invoice is not chased
    When the customer pays invoice inv_2001
    And ann starts chase-invoice as $chase with:
      | invoice_id | inv_2001 |
    Then $chase is done
    And the output of $chase is:
      | outcome | nothing to chase (paid) |
    And ap@northwind.example got 0 emails

  Scenario: Someone outside accounts receivable may not chase
    When bob starts chase-invoice with:
      | invoice_id | inv_2001 |
    Then it is refused because user:bob
