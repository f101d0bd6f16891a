# Sourced by the bench scripts that run NPB-CPP's OpenMP kernels (fetched by
# you, never copied here). `npb_binary NPB KERNEL.CLASS` checks the name
# (mg.W, cg.B, ...), builds the kernel in the checkout NPB if it is not built
# yet, and prints its path; a bad name stops the script with a message.
npb_binary() {
    local npb=$1 kc=$2
    local k=${kc%.*} c=${kc#*.}
    case "$k.$c" in
    [a-z][a-z].[SWABC]) ;;
    *) echo "NPB_KERNELS: '$kc' is not KERNEL.CLASS (e.g. mg.W, cg.B)" >&2; exit 2 ;;
    esac
    [ -x "$npb/NPB-OMP/bin/$kc" ] || make -C "$npb/NPB-OMP" "$k" CLASS="$c" >/dev/null
    echo "$npb/NPB-OMP/bin/$kc"
}
