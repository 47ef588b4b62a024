"""Layer 2: an agent's plain files, on the hook hot path: state.json, ops.jsonl, brief.md,
identity.yaml, teammates' heartbeats and the drift detectors the heartbeat runs."""
