// gRPC's version of the ping service and its sequential client, for rpc_bench's
// comparison rows: two int32 in, one int64 out, one call at a time on one channel.
// Built only when gRPC's development packages are found (benchmarks/CMakeLists.txt).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "../stats.hpp"
#include "ping.grpc.pb.h"

namespace tlaunch::bench {

class grpc_ping_service final : public tlaunch_bench::Ping::Service {
  grpc::Status Add(grpc::ServerContext*, const tlaunch_bench::AddRequest* req,
                   tlaunch_bench::AddReply* reply) override {
    reply->set_sum(std::int64_t{req->a()} + req->b());
    return grpc::Status::OK;
  }
};

// A gRPC server on host, any free port; it serves on gRPC's own threads until destroyed.
class grpc_ping_server {
 public:
  explicit grpc_ping_server(const std::string& host) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(host + ":0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0)
      throw std::runtime_error("gRPC comparison: cannot listen on " + host + ":0");
  }
  ~grpc_ping_server() { server_->Shutdown(); }
  int port() const { return port_; }

 private:
  grpc_ping_service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A client on one channel (one connection, like the other rows), kept across rounds.
class grpc_ping_client {
 public:
  explicit grpc_ping_client(const std::string& address) : address_(address) {
    grpc::ChannelArguments args;
    // No subchannel shared with other channels in this process.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = tlaunch_bench::Ping::NewStub(channel_);
  }

  // warmup calls, then count timed calls, one at a time; returns the timed calls'
  // wall time in seconds. Blocking: run it off the io threads.
  double sequential(std::size_t warmup, std::size_t count, latency_recorder& rec) {
    rec.reserve_more(count);
    bench_clock::time_point start{};
    for (std::size_t i = 0; i < warmup + count; ++i) {
      if (i == warmup) start = bench_clock::now();
      const auto a = static_cast<std::int32_t>(next_++ % 1000000);
      tlaunch_bench::AddRequest req;
      req.set_a(a);
      req.set_b(2);
      tlaunch_bench::AddReply reply;
      grpc::ClientContext ctx;
      auto t0 = bench_clock::now();
      auto status = stub_->Add(&ctx, req, &reply);
      if (i >= warmup) rec.add(elapsed_ns(t0));
      if (!status.ok())
        throw std::runtime_error("gRPC call to " + address_ + " failed: " + status.error_message());
      if (reply.sum() != std::int64_t{a} + 2)
        throw std::runtime_error("gRPC reply from " + address_ + " has the wrong sum");
    }
    return double(elapsed_ns(start)) / 1e9;
  }

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tlaunch_bench::Ping::Stub> stub_;
  std::uint64_t next_ = 0;
};

}  // namespace tlaunch::bench
