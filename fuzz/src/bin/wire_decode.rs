//! AFL++ target: see `farmem_fuzz::wire_decode`.
fn main() {
    afl::fuzz!(|data: &[u8]| farmem_fuzz::wire_decode(data));
}
