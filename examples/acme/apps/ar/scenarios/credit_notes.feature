Feature: Crediting an invoice line by line
  A controller credits the lines of an invoice the customer disputes. The credit note starts
  one run per line, each of which issues that line's credit note at the payments provider,
  waits for them all, and tells the customer the total. Clerks may not credit an invoice this
  way: theirs goes through a write-off's gate.

  Background:
    Given it is 2026-12-01 09:00 UTC
    And an invoice inv_2005 of 1,280.00 EUR due 2026-11-20 for ap@northwind.example

  Scenario: Two lines credited, each by a run of its own
    When carol starts credit-note as $note with:
      """
      {
        "invoice_id": "inv_2005",
        "lines": [
          {"description": "Damaged pallet", "amount": "300.00"},
          {"description": "Late delivery fee", "amount": "45.50"}
        ]
      }
      """
    Then $note is done
    And $note has started 2 credit-line runs
    And the children of $note are:
      | workflow    | key    | status |
      | credit-line | line-1 | done   |
      | credit-line | line-2 | done   |
    And $note has started the credit-line "line-2" as $fee
    And the child $fee is done
    And the output of $fee is:
      | line   | 2    |
      | amount | 4550 |
    And $note shows "progress" as:
      | lines    | 2 |
      | credited | 2 |
    And the output of $note is:
      | lines    | 2     |
      | credited | 34550 |
    And invoice inv_2005 has credit notes of 300.00 and 45.50
    And the last email to ap@northwind.example says "345.50 EUR credited"

  Scenario: A line over the balance fails its run, and the credit note with it
    When carol starts credit-note as $note with:
      """
      {
        "invoice_id": "inv_2005",
        "lines": [{"description": "Everything, twice", "amount": "2560.00"}]
      }
      """
    Then $note has started a credit-line as $line
    And $line failed because must be between 1 and the invoice's balance
    And $note failed because ChildFailed
    And ap@northwind.example got 0 emails

  Scenario: A clerk may not credit an invoice line by line
    When ann starts credit-note with:
      """
      {"invoice_id": "inv_2005", "lines": [{"description": "Goodwill", "amount": "10.00"}]}
      """
    Then it is refused because may not start
