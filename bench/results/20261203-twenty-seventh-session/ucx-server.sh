# Sourced by numpy-ucx.sh and redis-ucx.sh: start a loopback `farmem serve`
# with a shared secret (the only kind that offers UCX) and export what a
# program needs to reach it on the UCX path. Needs FM; stops the server on exit.
tmp=$(mktemp -d)
"$FM" secret init --path "$tmp/secret" >/dev/null
"$FM" serve --listen 127.0.0.1:0 --capacity 4G --secret-file "$tmp/secret" --log-level warn > "$tmp/serve.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
until grep -q listening "$tmp/serve.out"; do sleep 0.1; done
addr=$(sed -nE 's/.*listening on ([^ ]+).*/\1/p' "$tmp/serve.out")
echo "server $addr"
export FARMEM_TRANSPORT=ucx FARMEM_SERVERS=$addr FARMEM_SECRET_FILE=$tmp/secret
