//! Micro-benchmarks of the per-request work that does not touch the network:
//! key parsing, fingerprinting, canonical JSON and route matching.
//! Run with `cargo bench --bench hot_path`.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::Method;
use idemgate::config::{self, FingerprintPart};
use idemgate::key::{self, FingerprintInput};
use idemgate::route::RouteTable;

fn key_parsing(c: &mut Criterion) {
    let mut group = c.benchmark_group("key");
    group.bench_function("bare", |b| {
        b.iter(|| key::from_header_value(black_box(b"order-7f3a9c2e-1b4d-4e8f-9a6b-2c5d8e1f0a3b")))
    });
    group.bench_function("rfc8941_quoted", |b| {
        b.iter(|| key::from_header_value(black_box(br#""order-7f3a9c2e-1b4d-4e8f\"x\"""#)))
    });
    group.bench_function("json_pointer", |b| {
        let body =
            br#"{"id":"evt_1NQ9x2","type":"charge.succeeded","data":{"object":{"amount":1000}}}"#;
        b.iter(|| key::from_json_body(black_box(body), "/id"))
    });
    group.finish();
}

fn json_body(size: usize) -> Vec<u8> {
    let mut items = Vec::new();
    let mut length = 0;
    let mut i = 0;
    while length < size {
        let item = format!(
            r#"{{"id":{i},"name":"item-{i}","price":{}.5,"tags":["a","b"]}}"#,
            i * 3
        );
        length += item.len() + 1;
        items.push(item);
        i += 1;
    }
    format!(r#"{{"items":[{}]}}"#, items.join(",")).into_bytes()
}

fn fingerprinting(c: &mut Criterion) {
    let parts = [
        FingerprintPart::Method,
        FingerprintPart::Path,
        FingerprintPart::Query,
        FingerprintPart::Body,
    ];
    let mut group = c.benchmark_group("fingerprint");
    for (name, size) in [("1KiB", 1024), ("1MiB", 1024 * 1024)] {
        let body = json_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        let no_headers = |_: &str| None;
        let input = FingerprintInput {
            method: "POST",
            path: "/v1/charges",
            query: Some("expand=customer"),
            body: &body,
            header: &no_headers,
        };
        group.bench_function(format!("bytes_{name}"), |b| {
            b.iter(|| key::fingerprint(&parts, black_box(&input), false))
        });
        group.bench_function(format!("canonical_json_{name}"), |b| {
            b.iter(|| key::fingerprint(&parts, black_box(&input), true))
        });
    }
    group.finish();
}

fn route_matching(c: &mut Criterion) {
    let mut toml = String::from("[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n");
    for i in 0..100 {
        toml.push_str(&format!(
            "[[routes]]\nname = \"r{i}\"\nupstream = \"api\"\nmatch = {{ path_prefix = \"/v1/resource{i}/\" }}\n"
        ));
    }
    let config = config::parse(&toml, Path::new("bench.toml"), &|_| None).expect("valid config");
    let table = RouteTable::new(&config);
    let mut group = c.benchmark_group("route");
    group.bench_function("first_of_100", |b| {
        b.iter(|| {
            table
                .find(&Method::POST, black_box("/v1/resource0/x"))
                .is_some()
        })
    });
    group.bench_function("last_of_100", |b| {
        b.iter(|| {
            table
                .find(&Method::POST, black_box("/v1/resource99/x"))
                .is_some()
        })
    });
    group.bench_function("no_match_of_100", |b| {
        b.iter(|| table.find(&Method::POST, black_box("/nowhere")).is_some())
    });
    group.finish();
}

criterion_group!(benches, key_parsing, fingerprinting, route_matching);
criterion_main!(benches);
