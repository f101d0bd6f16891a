use reed_solomon_simd::*;
use std::time::Instant;
fn main() {
    let (k, m) = (4, 2);
    let data: Vec<Vec<u8>> = (0..k).map(|i| (0..4096).map(|b| (b * 7 + i * 13) as u8).collect()).collect();
    let par = reed_solomon_simd::encode(k, m, &data).unwrap();
    let mut dec = ReedSolomonDecoder::new(k, m, 4096).unwrap();
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        dec.reset(k, m, 4096).unwrap();
        for i in 1..k { dec.add_original_shard(i, &data[i]).unwrap(); }
        dec.add_recovery_shard(0, &par[0]).unwrap();
        let r = dec.decode().unwrap();
        assert_eq!(r.restored_original(0).unwrap(), &data[0][..]);
    }
    println!("decode one page 4+2: {:.1} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    let mut enc = ReedSolomonEncoder::new(k, m, 4096).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        enc.reset(k, m, 4096).unwrap();
        for d in &data { enc.add_original_shard(d).unwrap(); }
        let r = enc.encode().unwrap();
        std::hint::black_box(r.recovery(0));
    }
    println!("encode row 4+2: {:.1} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}
