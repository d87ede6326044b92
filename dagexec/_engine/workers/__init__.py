"""The worker threads: their loop, their bounded inboxes, the crew that starts and
replaces them, and the wire (what a job and a report look like)."""
