Feature: The demo's books
  `remit demo` starts from the invoices this background issues, beside the three the
  payments fake always holds (inv_1001 to inv_1003): the tour duns the customer of inv_1004.

  Background:
    Given an invoice inv_1004 of 2,450.00 EUR due 2026-11-20 for ap@tailspin.example

  Scenario: The demo's invoices are open, and the fake's own are there too
    Then invoice inv_1004 is open
    And invoice inv_1001 is open
    And invoice inv_1002 is paid
    And invoice inv_1003 is open
