"""runnerq-django: durable background work for Django on Postgres (RunnerQ spec 0.8)."""
