Feature: The weekly summary and credits
  A summary runs every Monday at 06:00 UTC; a credit is an exact amount of money.

  Background:
    Given it is 2026-11-29 09:00 UTC

  Scenario: Three weeks pass in one step, and each Monday's summary runs once, in order
    When 3 weeks pass
    Then the schedule weekly-summary has fired 3 runs
    And the runs of the schedule weekly-summary are:
      | at                   | status |
      | 2026-11-30 06:00 UTC | done   |
      | 2026-12-07 06:00 UTC | done   |
      | 2026-12-14 06:00 UTC | done   |

  Scenario: The next summary fires on its own step
    Then the schedule weekly-summary has fired no runs
    When the schedule weekly-summary fires as $summary
    Then $summary is done
    And the output of $summary is:
      | week_of | 2026-11-30 |
    And the schedule weekly-summary has fired 1 run

  Scenario: A table's amount means what the input model says
    When ann starts credit as $credit with:
      | invoice_id | 0042   |
      | amount     | 120.00 |
    Then $credit is done
    And the output of $credit is:
      | invoice_id | 0042   |
      | amount     | 120.00 |
