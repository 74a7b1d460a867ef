Feature: A month of dunning
  Dunning reminds a customer of an open invoice for a month: a friendly email at once, a firm
  one a week later, a final one the week after, and on the thirtieth day a notice that the
  invoice goes to collections. Between reminders it waits for the payments feed to say the
  customer paid, and stops as soon as it does.

  Background:
    Given it is 2026-12-01 09:00 UTC
    And an invoice inv_2002 of 459.00 EUR due 2026-11-15 for billing@contoso.example

  Scenario: The customer pays after the second reminder
    When ann starts dunning as $dunning with:
      | invoice_id | inv_2002 |
    Then $dunning is waiting for "paid"
    And billing@contoso.example got 1 email
    And the last email to billing@contoso.example says "friendly reminder"
    When 7 days pass
    Then billing@contoso.example got 2 emails
    And the last email to billing@contoso.example says "firm reminder"
    And $dunning shows "progress" as:
      | reminders | 2    |
      | last      | firm |
    When 2 days pass
    And the payments feed sends $dunning "paid" with:
      | amount    | 459.00         |
      | reference | py_3QzLk42Hdu8 |
    Then $dunning is done
    And the output of $dunning is:
      | outcome   | paid           |
      | reminders | 2              |
      | paid      | 459.00         |
      | reference | py_3QzLk42Hdu8 |
    And billing@contoso.example got 2 emails
    And invoice inv_2002 has 2 reminders

  Scenario: Nobody pays, and the invoice goes to collections
    When ann starts dunning as $dunning with:
      | invoice_id | inv_2002 |
    And 7 days pass
    And 7 days pass
    Then invoice inv_2002 has 3 reminders
    And the last email to billing@contoso.example says "Please pay within 7 days"
    And $dunning is waiting for "paid"
    When 16 days pass
    Then $dunning is done
    And the output of $dunning is:
      | outcome   | handed to collections |
      | reminders | 3                     |
      | day       | 30                    |
    And billing@contoso.example got 4 emails
    And the last email to billing@contoso.example says "final notice"

  Scenario: Only the payments feed says an invoice was paid
    When ann starts dunning as $dunning with:
      | invoice_id | inv_2002 |
    And ann sends $dunning "paid" with:
      | amount    | 459.00 |
      | reference | cash   |
    Then it is refused because may not send
    And $dunning is waiting for "paid"
    When carol sends $dunning "paid" with:
      | amount    | 459.00             |
      | reference | bank transfer 0716 |
    Then $dunning is done
    And the output of $dunning is:
      | outcome   | paid               |
      | reminders | 1                  |
      | reference | bank transfer 0716 |
