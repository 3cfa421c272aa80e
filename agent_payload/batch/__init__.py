"""Batch jobs: many payloads through the providers' batch APIs (or concurrently, for servers
with none), resumable from one SQLite state file; the guide is docs/batch.md.

Each reply is judged by the agent's own run state, as ``PayloadAgent.run`` judges it; each step
is one transaction of the state file, so the process may die at any moment and ``run()`` carry
on with nothing submitted or applied twice. ``_job`` holds ``BatchJob`` (the rounds and the
judging), ``_state`` the state file (format, marker, lease), ``_records`` what a job hands out.
"""

from agent_payload.batch._job import BatchJob
from agent_payload.batch._records import BatchItemResult, BatchProgress
from agent_payload.batch._state import BatchStateError

__all__ = ["BatchItemResult", "BatchJob", "BatchProgress", "BatchStateError"]
