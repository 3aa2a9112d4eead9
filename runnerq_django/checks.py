"""System checks of runnerq_django: settings, the live schema, declared periodic jobs."""
