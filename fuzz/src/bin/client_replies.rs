//! AFL++ target: see `farmem_fuzz::client_replies`.
fn main() {
    afl::fuzz!(|data: &[u8]| farmem_fuzz::client_replies(data));
}
