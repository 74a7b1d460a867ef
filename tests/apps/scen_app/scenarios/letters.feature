Feature: Posting a letter
  A letter is a write remit may not repeat: when the post office's answer is lost, a person
  says whether it went out.

  Background:
    Given it is 2026-11-29 09:00 UTC

  Scenario: A letter goes out
    When ann starts post-letter as $letter with:
      | to | ap@northwind.example |
    Then $letter is done
    And the output of $letter is:
      | letter_id | lt_1 |
    And 1 letters were posted

  Scenario: The answer is lost, and a clerk says the letter went out
    When ann starts post-letter as $letter with:
      | to | ap@unreachable.example |
    Then $letter is waiting
    And the ledger of $letter is:
      | op                 | status    |
      | books.letters.post | uncertain |
    When ann says the task of $letter happened with:
      | letter_id | lt_9 |
    Then $letter is done
    And the output of $letter is:
      | letter_id | lt_9 |

  Scenario: The answer is lost, and the letter did not go out
    When ann starts post-letter as $letter with:
      | to | ap@unreachable.example |
    And carol says the task of $letter did not happen
    Then $letter failed because did not happen
