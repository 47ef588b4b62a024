"""Layer 3: what combines the stores: the Agent facade, doctor, watchdog, persona, team
resume, transfer, checkpoint providers, the demo and the memory bridge's operations."""
