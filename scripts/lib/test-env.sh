# Sourced by scripts/test and .ci/run (from the repository root): installs and starts
# every server the test suite uses, and stops them (by PID) when the sourcing shell exits.
#   - the MCP reference server (@modelcontextprotocol/server-everything, pinned, npm) for
#     tests/it/mcp.rs over stdio, and the same server over streamable HTTP;
#   - Redis and PostgreSQL from Debian's packages (scripts/test-servers);
#   - a real LLM (llama-server + Qwen2.5-Coder-1.5B, scripts/real-model; the first run
#     downloads ~1.1 GB and builds, cached under target/real-model).
# Exports REIN_MCP_EVERYTHING, MCP_HTTP_*, REIN_REDIS_URL, REIN_POSTGRES_URL, ...,
# REIN_REAL_MODEL_URL, and REAL_MODEL_ENV (the OPENAI_* settings for the examples, not
# exported: examples stay offline unless a step evals it).
# Needs `step` (a heading printer) defined by the caller; defines one if absent.
# Already started by the calling process (.ci/run runs scripts/test): nothing to do.
if [ "${REIN_TEST_ENV_READY:-}" = 1 ]; then
  return 0
fi
if ! declare -F step >/dev/null; then
  step() { printf '\n== %s ==\n' "$*"; }
fi

# The reference MCP server for the real-server tests (tests/it/mcp.rs, examples/mcp.rs).
MCP_SERVER_VERSION=2026.8.31
MCP_SERVER_JS="$PWD/target/mcp-server/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
step "install @modelcontextprotocol/server-everything@$MCP_SERVER_VERSION"
if ! grep -q "\"version\": \"$MCP_SERVER_VERSION\"" "$(dirname "$MCP_SERVER_JS")/../package.json" 2>/dev/null; then
  npm install --prefix target/mcp-server --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$MCP_SERVER_VERSION"
fi
export REIN_MCP_EVERYTHING="$MCP_SERVER_JS"

# Real Redis and PostgreSQL for the session-store tests (tests/it/store_*.rs): installed
# from Debian's packages if missing, on random loopback ports, stopped by PID at exit.
step "start redis-server and PostgreSQL (scripts/test-servers)"
source scripts/test-servers
# More local servers for the tests, stopped (by PID) however this script exits (this trap
# also stops the Redis and PostgreSQL servers started above): the reference MCP
# server over streamable HTTP (the MCP tests run over stdio and HTTP), and a real LLM
# (llama-server + Qwen2.5-Coder-1.5B, downloaded and built once under target/real-model) for
# the real_model test group and the quickstart example.
stop_servers() {
  scripts/mcp-http stop || true
  scripts/real-model stop || true
  __rein_ts_stop
}
trap stop_servers EXIT
step "start the MCP reference server over streamable HTTP (scripts/mcp-http)"
scripts/mcp-http start
eval "$(scripts/mcp-http env)"
step "start the real local model (scripts/real-model; the first run downloads ~1.1 GB and builds)"
time scripts/real-model start
REAL_MODEL_ENV="$(scripts/real-model env)"
# Only the tests read REIN_REAL_MODEL_URL; OPENAI_* stay unset so the examples run offline
# except where a step asks for the real model.
eval "$(grep REIN_REAL_MODEL_URL <<<"$REAL_MODEL_ENV")"
export REIN_TEST_ENV_READY=1
