"""What people do in a run: approval gates and their decisions, tasks for uncertain writes, and notices."""
