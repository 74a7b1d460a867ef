Feature: A month of dunning
  Dunning reminds a customer of an open invoice for a month: a friendly email at once, a firm
  one a week later, a final one the week after, and on the thirtieth day a notice that the
  invoice goes to collections. It stops as soon as the customer pays.

  Background:
    Given it is 2026-12-01 09:00 UTC
    And an invoice inv_2002 of 459.00 EUR due 2026-11-15 for billing@contoso.example

  Scenario: The customer pays after the second reminder
    When ann starts dunning as $dunning with:
      | invoice_id | inv_2002 |
    Then $dunning is sleeping
    And billing@contoso.example got 1 email
    And the last email to billing@contoso.example says "friendly reminder"
    When 7 days pass
    Then billing@contoso.example got 2 emails
    And the last email to billing@contoso.example says "firm reminder"
    When the customer pays invoice inv_2002
    And 7 days pass
    Then $dunning is done
    And the output of $dunning is:
      | outcome   | stopped (paid) |
      | reminders | 2              |
      | day       | 14             |
    And billing@contoso.example got 2 emails
    And invoice inv_2002 has 2 reminders

  Scenario: Nobody pays, and the invoice goes to collections
    When ann starts dunning as $dunning with:
      | invoice_id | inv_2002 |
    And 7 days pass
    And 7 days pass
    Then invoice inv_2002 has 3 reminders
    And the last email to billing@contoso.example says "Please pay within 7 days"
    And $dunning is sleeping
    When 16 days pass
    Then $dunning is done
    And the output of $dunning is:
      | outcome   | handed to collections |
      | reminders | 3                     |
      | day       | 30                    |
    And billing@contoso.example got 4 emails
    And the last email to billing@contoso.example says "final notice"
