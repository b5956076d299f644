// A separate process that makes one control-plane call, for tests that need
// a caller other than the test itself (another user, another pid namespace,
// a process that forges fields). Its exit status is the call's gRPC code
// (0 OK, 6 ALREADY_EXISTS, 7 PERMISSION_DENIED, ...); 50+ for its own
// failures. Every stream it opens has one spec: synthetic, G 8, W 2,
// examples 1000, payload 64, 2 slots.
//
// Usage: test_rpc_caller SERVER open STREAM RANK [--client-pid PID] [--hold]
//                        [--owner UID]
//        test_rpc_caller SERVER close STREAM [--owner UID]
//        test_rpc_caller SERVER drain|shutdown
//        test_rpc_caller SERVER open-invalid-utf8 COUNT
//
// open --hold: attaches the ring, reads one batch, prints "attached", then
// waits for its stdin to close and reads one more batch: exit 0 when that
// batch came, 60 (printing the error) when the ring was taken from it.
// Without --hold, open sends the request itself (with --client-pid in the
// request's client_pid field) and, if it succeeded, prints "opened" and
// waits for stdin to close without ever mapping the ring. --owner sets the
// request's owner_uid: another uid's stream.
//
// open-invalid-utf8: COUNT OpenStream calls one after another whose spec
// holds bytes that are not UTF-8 (which protobuf refuses to parse); exit 0
// when the daemon answered every one with an error, 52 when one was
// accepted or went unanswered.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/address.h"
#include "batchd/loader.h"
#include "batchd/v1/batchd.grpc.pb.h"
#include "batchd/version.h"
#include "tests/synthetic_stream.h"

namespace {

void WaitForStdinToClose() {
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
}

int Code(const grpc::Status& s) {
  if (!s.ok()) fprintf(stderr, "%s\n", s.error_message().c_str());
  return int(s.error_code());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 50;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string server = argv[1], op = argv[2];
  auto stub = batchd::v1::Batchd::NewStub(
      grpc::CreateChannel(batchd::ParseAddress(server).grpc_target,
                          grpc::InsecureChannelCredentials()));
  auto context = [] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(20));
    return ctx;
  };
  if (op == "open" && argc >= 5) {
    const std::string stream = argv[3];
    const int rank = atoi(argv[4]);
    uint32_t client_pid = uint32_t(getpid());
    bool hold = false;
    int64_t owner = -1;
    for (int i = 5; i < argc; ++i) {
      if (strcmp(argv[i], "--hold") == 0) hold = true;
      if (strcmp(argv[i], "--client-pid") == 0 && i + 1 < argc) {
        client_pid = uint32_t(atoi(argv[++i]));
      }
      if (strcmp(argv[i], "--owner") == 0 && i + 1 < argc) {
        owner = strtoll(argv[++i], nullptr, 10);
      }
    }
    if (hold) {
      batchd::LoaderOptions o =
          batchd::testutil::SyntheticStream(server, stream, 8, 2, rank);
      o.owner_uid = owner;
      auto loader = batchd::Loader::Open(o);
      if (!loader.ok()) {
        fprintf(stderr, "%s\n", loader.status().ToString().c_str());
        return int(loader.status().code());
      }
      auto first = (*loader)->Next();
      if (!first.ok()) return 61;
      first->Release();
      printf("attached\n");
      WaitForStdinToClose();
      auto next = (*loader)->Next();
      if (!next.ok()) {
        printf("%s\n", next.status().ToString().c_str());
        return 60;
      }
      return 0;
    }
    batchd::v1::OpenStreamRequest req;
    batchd::v1::StreamSpec* spec = req.mutable_spec();
    spec->set_name(stream);
    spec->set_workload("synthetic");
    spec->set_split("train");
    spec->set_global_batch_size(8);
    spec->set_world_size(2);
    spec->set_slots(2);
    (*spec->mutable_options())["examples"] = "1000";
    (*spec->mutable_options())["payload_bytes"] = "64";
    req.set_rank(uint32_t(rank));
    req.set_client_pid(client_pid);
    if (owner >= 0) req.set_owner_uid(uint32_t(owner));
    req.set_protocol_version(batchd::kProtocolVersion);
    batchd::v1::OpenStreamResponse resp;
    const int code = Code(stub->OpenStream(context().get(), req, &resp));
    if (code == 0) {
      printf("opened %s\n", resp.segment().c_str());
      WaitForStdinToClose();
    }
    return code;
  }
  if (op == "close" &&
      (argc == 4 || (argc == 6 && strcmp(argv[4], "--owner") == 0))) {
    batchd::v1::CloseStreamRequest req;
    req.set_name(argv[3]);
    if (argc == 6) req.set_owner_uid(uint32_t(strtoul(argv[5], nullptr, 10)));
    batchd::v1::CloseStreamResponse resp;
    return Code(stub->CloseStream(context().get(), req, &resp));
  }
  if (op == "open-invalid-utf8" && argc == 4) {
    // This side's own complaint about serializing the bytes is not wanted.
    google::protobuf::SetLogHandler(nullptr);
    const int count = atoi(argv[3]);
    for (int i = 0; i < count; ++i) {
      batchd::v1::OpenStreamRequest req;
      batchd::v1::StreamSpec* spec = req.mutable_spec();
      spec->set_name("flood" + std::to_string(i));
      spec->set_workload("synthetic");
      spec->set_data(std::string("bad\xff\xfe") + std::to_string(i));
      spec->set_global_batch_size(8);
      spec->set_world_size(1);
      req.set_protocol_version(batchd::kProtocolVersion);
      batchd::v1::OpenStreamResponse resp;
      const grpc::Status s = stub->OpenStream(context().get(), req, &resp);
      if (s.ok() || s.error_code() == grpc::StatusCode::UNAVAILABLE ||
          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        fprintf(stderr, "call %d: %d %s\n", i, int(s.error_code()),
                s.error_message().c_str());
        return 52;
      }
    }
    printf("refused %d\n", count);
    return 0;
  }
  if (op == "drain") {
    batchd::v1::DrainResponse resp;
    return Code(stub->Drain(context().get(), {}, &resp));
  }
  if (op == "shutdown") {
    batchd::v1::ShutdownResponse resp;
    return Code(stub->Shutdown(context().get(), {}, &resp));
  }
  return 51;
}
