Feature: A change to the shop's repo
  A branch of the shop's operations repo is checked, reviewed by someone other than its author,
  merged and deployed to the shop's app host, as one run of the built-in workflow `change`.

  Scenario: A reviewed change is merged and deployed
    Given the branch "notes" changes "NOTES.md" to:
      """
      What the shop changed, and why.
      """
    When ann opens a change of "notes" titled "Add the shop's notes" as $change
    Then $change is "review"
    And the checks of $change passed
    And $change is waiting
    When ann approves $change
    Then it is refused because its author may not approve it
    When carol approves $change
    Then $change is deployed
    And the gate of $change was decided by carol
    And $change is done
