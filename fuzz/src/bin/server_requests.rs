//! AFL++ target: see `farmem_fuzz::server_requests`.
fn main() {
    afl::fuzz!(|data: &[u8]| farmem_fuzz::server_requests(data));
}
