//! AFL++ target: see `farmem_fuzz::regions`.
fn main() {
    afl::fuzz!(|data: &[u8]| farmem_fuzz::regions(data));
}
