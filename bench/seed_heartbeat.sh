#!/usr/bin/env bash
# Baseline (b) for bench/hook_latency.py: a bash + jq equivalent of seed 000's `state-update`
# script doing what our PostToolUse hook does (last_active, heartbeat counter, last tool),
# with the seed's write pattern (jq to a mktemp file, then mv). No lock, no fsync, no log.
STATE_FILE="${PHOENIX_STATE_DIR:-.}/state.json"
input=$(cat)
tool=$(printf '%s' "$input" | jq -r '.tool_name // ""')
tmp=$(mktemp "${STATE_FILE}.XXXXXX")
if [[ -f "$STATE_FILE" ]]; then
  jq --arg ts "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg tool "$tool" \
     '.last_active=$ts | .heartbeat_seq=((.heartbeat_seq // 0)+1) | .last_tool=$tool' "$STATE_FILE" > "$tmp"
else
  echo "{\"status\":\"working\",\"last_active\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\",\"heartbeat_seq\":1}" > "$tmp"
fi
mv "$tmp" "$STATE_FILE"
