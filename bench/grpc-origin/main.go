// A gRPC origin for bench/grpc.sh: one unary method, /bench.Echo/Say, that answers every
// call with the message it was sent. No generated code: the service is registered by hand
// with a codec that passes message bytes through, so the server does the same work for any
// payload (framing, HPACK, flow control: what a gateway in front of it is measured against).
package main

import (
	"context"
	"flag"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// raw passes a message's bytes through unencoded.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error)      { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(b []byte, v any) error     { *(v.(*[]byte)) = append([]byte(nil), b...); return nil }
func (raw) Name() string                        { return "proto" }

type echo interface{}

type server struct{}

func say(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var in []byte
	if err := dec(&in); err != nil {
		return nil, err
	}
	return &in, nil
}

var desc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*echo)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: say}},
	Streams:     []grpc.StreamDesc{},
}

func main() {
	addr := flag.String("listen", "127.0.0.1:50051", "address to listen on")
	flag.Parse()
	encoding.RegisterCodec(raw{})
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(raw{}))
	s.RegisterService(&desc, server{})
	log.Printf("gRPC origin on %s", *addr)
	log.Fatal(s.Serve(l))
}
