"""The plan.json format name and version (plan/io.py writes and reads it; docs/plan.schema.json
describes it)."""

PLAN_FORMAT = "cisl-plan"
PLAN_VERSION = 2  # 2: Mixer rounds carry takeover_slots (the backup initiator)
