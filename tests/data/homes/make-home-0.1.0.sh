#!/usr/bin/env bash
# Makes tests/data/homes/home-0.1.0.tar.gz: a Phoenix home written by release 0.1.0 (commit
# 3b4964a, the last release with the file stores), and expected-0.1.0.json: what that release
# read back from it. tests/store/test_legacy_home.py opens it with today's code and checks that
# every checkpoint, session, message, cursor, ack, task, token and memory comes back.
#
# Run with the phx of a checkout of 3b4964a:  PHX=/path/to/phx bash tests/data/homes/make-home-0.1.0.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
phx="${PHX:-$PWD/.venv/bin/phx}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PHOENIX_HOME="$work/home" HOME="$work/user" TZ=UTC
mkdir -p "$HOME"
hook() { # hook EVENT SESSION AGENT
  printf '{"session_id":"%s","transcript_path":"/tmp/t.jsonl","cwd":"%s","hook_event_name":"%s"}' "$2" "$work" "$1" |
    PHOENIX_AGENT="$3" "$phx" hook "$4" >/dev/null
}

for agent in alpha beta; do
  export PHOENIX_AGENT=$agent
  hook SessionStart "$agent-s1" $agent session-start
  "$phx" state working "Migrate the users table ($agent)" >/dev/null
  "$phx" note open-loop "Index on email not decided" >/dev/null
  "$phx" note next-action "Backfill created_at" >/dev/null
  "$phx" identity set state.current_focus "users table" >/dev/null
  "$phx" checkpoint --summary "Schema drafted" >/dev/null
  "$phx" checkpoint --type routine >/dev/null
  "$phx" checkpoint --type recovery >/dev/null
  op=$("$phx" checkpoint begin-op "drop legacy ($agent)" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["operation"]["id"])')
  "$phx" checkpoint end-op "$op" >/dev/null
  op=$("$phx" checkpoint begin-op "rename column ($agent)" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["operation"]["id"])')
  "$phx" checkpoint end-op "$op" --error "column in use" >/dev/null
  "$phx" memory store "The users table is sharded by tenant ($agent)" --tag schema --tag users >/dev/null
  "$phx" memory store "Backfills run at night, never in business hours" --tag ops >/dev/null
  hook SessionEnd "$agent-s1" $agent session-end
  hook SessionStart "$agent-s2" $agent session-start
  "$phx" checkpoint --summary "Second session, still open" >/dev/null
done
unset PHOENIX_AGENT

team=$("$phx" team create release --lead lead --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["team"]["team_id"])')
for mate in alice bob; do "$phx" team join "$team" $mate >/dev/null; done
"$phx" team task add "$team" "Schema" >/dev/null
"$phx" team task add "$team" "Backfill" --after task-0001 >/dev/null
"$phx" team task add "$team" "Docs" >/dev/null
"$phx" team claim "$team" task-0001 --as alice >/dev/null
"$phx" team done "$team" task-0001 --as alice >/dev/null
"$phx" team claim "$team" task-0002 --as bob >/dev/null
for i in 1 2 3 4 5 6; do
  "$phx" team send "$team" --from lead --to alice --subject "Step $i" --body "Do step $i" --id "msg-$i" >/dev/null
done
"$phx" team send "$team" --from alice --to '*' --subject "Found it" --body "Deadlock at line 427" --id msg-b1 >/dev/null
"$phx" team send "$team" --from bob --to lead --type question --subject "Backfill window?" --body "Night?" --id msg-q1 >/dev/null
"$phx" team inbox "$team" --as alice --limit 4 --json >/dev/null
"$phx" team ack "$team" 1 --as alice >/dev/null
"$phx" team ack "$team" 2 --as alice >/dev/null
"$phx" team inbox "$team" --as lead --json >/dev/null
"$phx" team checkpoint "$team" >/dev/null

"$phx" token create --agent alpha --scope memory:read --label reader --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' > "$work/reader"
"$phx" token create --all-namespaces --scope '*' --label operator --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["info"]["id"])' > "$work/op-id"
"$phx" token revoke "$(cat "$work/op-id")" >/dev/null

# What this release reads back: the expectations of the migration test.
{
  printf '{"team_id": "%s", "reader_token": "%s", "agents": {' "$team" "$(cat "$work/reader")"
  first=1
  for agent in alpha beta; do
    [ $first = 1 ] || printf ','; first=0
    printf '"%s": {"checkpoints": %s, "sessions": %s, "memories": %s}' "$agent" \
      "$("$phx" checkpoint list --agent $agent --json)" \
      "$("$phx" sessions --agent $agent --json)" \
      "$(PHOENIX_AGENT=$agent "$phx" memory list --json)"
  done
  printf '}, "tasks": %s, "status": %s, "probe": %s, "replay": %s, "tokens": %s}\n' \
    "$("$phx" team tasks "$team" --json)" \
    "$("$phx" team status "$team" --json)" \
    "$("$phx" team probe "$team" --json 2>/dev/null || echo null)" \
    "$("$phx" team replay "$team" --json)" \
    "$("$phx" token list --json)"
} | python3 -m json.tool > "$here/expected-0.1.0.json"
tar -C "$work" -czf "$here/home-0.1.0.tar.gz" home
# What 0.1.0's `phx export` wrote of that home (tokens.json as a file, checkpoints as files).
PHOENIX_STORE=files "$phx" export "$work/export.jsonl" --home "$PHOENIX_HOME" >/dev/null
gzip -9 -c "$work/export.jsonl" > "$here/export-0.1.0.jsonl.gz"
echo "wrote $here/home-0.1.0.tar.gz, export-0.1.0.jsonl.gz and expected-0.1.0.json"
