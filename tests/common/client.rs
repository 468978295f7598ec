use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

#[derive(Clone)]
pub struct Client {
    base: String,
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            base: format!("http://{addr}"),
            inner: HyperClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// HTTP/2 over cleartext with prior knowledge.
    pub fn h2c(addr: SocketAddr) -> Self {
        Self {
            base: format!("http://{addr}"),
            inner: HyperClient::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        }
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut builder = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("{}{}", self.base, path));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(body.into())).unwrap();
        let response = self.inner.request(request).await.expect("request failed");
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .expect("reading the body failed")
            .to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    pub async fn post(&self, path: &str, key: Option<&str>, body: &str) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(key) = key {
            headers.push(("idempotency-key", key));
        }
        self.send("POST", path, &headers, body.to_string()).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[], Bytes::new()).await
    }
}
