"""The policies: Cedar files, the guard every act passes, and the refusals it records."""
