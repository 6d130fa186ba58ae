"""The plan.json format name and version (plan/io.py writes and reads it; docs/plan.schema.json
describes it)."""

PLAN_FORMAT = "cisl-plan"
PLAN_VERSION = 1
