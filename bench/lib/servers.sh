# Sourced by the replica benchmarks: start_servers N DIR starts N
# `farmem serve` processes on loopback ports chosen by the kernel (capacity
# $CAPACITY, default 1G; more options in $SERVE_ARGS), waits for their banners, and sets the arrays
# SERVER_PIDS and SERVER_ADDRS and the list SERVERS ("a,b,c").
start_servers() {
    local n=$1 dir=$2 i
    SERVER_PIDS=() SERVER_ADDRS=()
    for ((i = 0; i < n; i++)); do
        # shellcheck disable=SC2086 # SERVE_ARGS is a list of options
        "$F" serve --listen 127.0.0.1:0 --capacity "${CAPACITY:-1G}" ${SERVE_ARGS:-} > "$dir/s$i.out" 2>&1 &
        SERVER_PIDS+=($!)
    done
    for ((i = 0; i < n; i++)); do
        until grep -qs listening "$dir/s$i.out"; do sleep 0.05; done
        SERVER_ADDRS+=("$(awk '/listening/ {print $5; exit}' "$dir/s$i.out")")
    done
    SERVERS=$(IFS=,; echo "${SERVER_ADDRS[*]}")
}
