"""What an app declares: workflows, their schedules, and the ops its connectors offer."""
