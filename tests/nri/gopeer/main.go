// Command gopeer is a real Go ttrpc peer (Debian's github.com/containerd/ttrpc 1.1.1) for koordlet's wire tests.
//
// Modes: `-listen PATH` serves koordlet.test.Echo on a plain Unix socket; `-dial PATH` is a plain ttrpc client;
// `-socket PATH` plays containerd's NRI side for one external plugin at a time (mux, Runtime service on ConnID 2,
// client on ConnID 1). Commands arrive as JSON lines on stdin; replies and events leave as JSON lines on stdout.
// The mux here is written from koordlet's protocol notes (shared/spec/protocols.md §1.3), not taken from NRI.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	echoService    = "koordlet.test.Echo"
	runtimeService = "nri.pkg.api.v1alpha1.Runtime"
	pluginService  = "nri.pkg.api.v1alpha1.Plugin"
)

// raw carries payload bytes through ttrpc's gogo codec untouched: proto.Marshal/Unmarshal use these methods.
type raw struct{ b []byte }

func (r *raw) Reset()                   { r.b = nil }
func (r *raw) String() string           { return fmt.Sprintf("raw(%d bytes)", len(r.b)) }
func (r *raw) ProtoMessage()            {}
func (r *raw) Marshal() ([]byte, error) { return r.b, nil }
func (r *raw) Unmarshal(b []byte) error { r.b = append([]byte(nil), b...); return nil }

// ---- output ----

var outMu sync.Mutex

func emit(v map[string]interface{}) {
	line, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

type command struct {
	ID        int64  `json:"id"`
	Service   string `json:"service"`
	Method    string `json:"method"`
	Call      string `json:"call"`
	Op        string `json:"op"`
	Payload   []byte `json:"payload"`
	TimeoutMs int64  `json:"timeout_ms"`
	N         int    `json:"n"`
}

// codeOf maps a ttrpc client error to a status code and message.
func codeOf(err error) (int, string) {
	if err == nil {
		return 0, ""
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return int(codes.DeadlineExceeded), err.Error()
	}
	if st, ok := status.FromError(err); ok {
		return int(st.Code()), st.Message()
	}
	return int(codes.Unknown), err.Error()
}

// call makes one unary call; timeout 0 means no deadline.
func call(c *ttrpc.Client, service, method string, payload []byte, timeoutMs int64) ([]byte, int, string, time.Duration) {
	ctx := context.Background()
	if timeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
		defer cancel()
	}
	var resp raw
	start := time.Now()
	err := c.Call(ctx, service, method, &raw{b: payload}, &resp)
	took := time.Since(start)
	code, msg := codeOf(err)
	return resp.b, code, msg, took
}

func commands(handle func(command)) {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var cmd command
		if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
			emit(map[string]interface{}{"event": "bad_command", "error": err.Error()})
			continue
		}
		handle(cmd)
	}
}

// ---- plain ttrpc: the echo service and a client ----

func echoMethods() map[string]ttrpc.Method {
	return map[string]ttrpc.Method{
		"Echo": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			var req raw
			if err := unmarshal(&req); err != nil {
				return nil, err
			}
			return &req, nil
		},
		"Fail": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			var req raw
			if err := unmarshal(&req); err != nil || len(req.b) == 0 {
				return nil, status.Errorf(codes.InvalidArgument, "Fail needs a code byte")
			}
			return nil, status.Errorf(codes.Code(req.b[0]), "failed")
		},
		"Sleep": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			var req raw
			if err := unmarshal(&req); err != nil {
				return nil, err
			}
			ms, err := strconv.Atoi(string(req.b))
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "Sleep needs milliseconds: %v", err)
			}
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return &raw{}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

func listenMode(path string) {
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		fatal(err)
	}
	srv.Register(echoService, echoMethods())
	go srv.Serve(context.Background(), l)
	emit(map[string]interface{}{"event": "listening"})
	commands(func(command) {}) // serve until stdin closes
	srv.Close()
	os.Remove(path)
}

func dialMode(path string) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		fatal(err)
	}
	client := ttrpc.NewClient(conn)
	emit(map[string]interface{}{"event": "connected"})
	var wg sync.WaitGroup
	commands(func(cmd command) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, code, msg, _ := call(client, cmd.Service, cmd.Method, cmd.Payload, cmd.TimeoutMs)
			emit(map[string]interface{}{"id": cmd.ID, "code": code, "message": msg, "payload": p})
		}()
	})
	wg.Wait()
	client.Close()
}

// ---- the NRI connection multiplexer: 8-byte frames (ConnID, length, big-endian), no control frames ----

const (
	muxQueue      = 256 // frames queued per ConnID; more tears the whole mux down
	muxMaxPayload = 10 + 4<<20
)

type mux struct {
	trunk     net.Conn
	writeMu   sync.Mutex
	mu        sync.Mutex
	conns     map[uint32]*muxConn
	done      chan struct{}
	closeOnce sync.Once
	frames    map[uint32]int // received frames per ConnID, and the largest payload
	largest   map[uint32]int
}

type muxConn struct {
	m      *mux
	id     uint32
	queue  chan []byte
	closed chan struct{}
	once   sync.Once
}

func newMux(trunk net.Conn) *mux {
	return &mux{trunk: trunk, conns: map[uint32]*muxConn{}, done: make(chan struct{}),
		frames: map[uint32]int{}, largest: map[uint32]int{}}
}

func (m *mux) open(id uint32) *muxConn {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &muxConn{m: m, id: id, queue: make(chan []byte, muxQueue), closed: make(chan struct{})}
	m.conns[id] = c
	return c
}

func (m *mux) close(why string) {
	m.closeOnce.Do(func() {
		if why != "" {
			emit(map[string]interface{}{"event": "mux_error", "error": why})
		}
		close(m.done)
		m.trunk.Close()
	})
}

// reader hands each frame's payload to its ConnID's queue, dropping frames nobody opened.
func (m *mux) reader() {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(m.trunk, hdr[:]); err != nil {
			m.close("")
			return
		}
		id, n := binary.BigEndian.Uint32(hdr[0:4]), binary.BigEndian.Uint32(hdr[4:8])
		payload := make([]byte, n)
		if _, err := io.ReadFull(m.trunk, payload); err != nil {
			m.close("")
			return
		}
		m.mu.Lock()
		c := m.conns[id]
		m.frames[id]++
		if int(n) > m.largest[id] {
			m.largest[id] = int(n)
		}
		m.mu.Unlock()
		if c == nil {
			continue
		}
		select {
		case c.queue <- payload:
		default:
			m.close(fmt.Sprintf("ConnID %d: more than %d frames queued", id, muxQueue))
			return
		}
	}
}

// write sends one frame per write, as NRI's mux does; Go ttrpc's 4096-byte bufio.Writer makes the [4096, rest]
// splits. Only a write larger than the largest ttrpc message is cut.
func (m *mux) write(id uint32, p []byte) (int, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	sent := 0
	for sent < len(p) {
		n := len(p) - sent
		if n > muxMaxPayload {
			n = muxMaxPayload
		}
		buf := make([]byte, 8+n)
		binary.BigEndian.PutUint32(buf[0:4], id)
		binary.BigEndian.PutUint32(buf[4:8], uint32(n))
		copy(buf[8:], p[sent:sent+n])
		if _, err := m.trunk.Write(buf); err != nil {
			return sent, err
		}
		sent += n
	}
	return sent, nil
}

// Read returns one whole frame; a frame larger than the caller's buffer is an error, as in NRI's reader.
func (c *muxConn) Read(p []byte) (int, error) {
	var b []byte
	select {
	case b = <-c.queue:
	default:
		select {
		case b = <-c.queue:
		case <-c.m.done:
			return 0, io.EOF
		case <-c.closed:
			return 0, io.EOF
		}
	}
	if len(b) > len(p) {
		emit(map[string]interface{}{"event": "mux_error", "conn": c.id,
			"error": fmt.Sprintf("a %d-byte frame for a %d-byte read: %v", len(b), len(p), syscall.ENOMEM)})
		return 0, syscall.ENOMEM
	}
	return copy(p, b), nil
}

func (c *muxConn) Write(p []byte) (int, error) {
	select {
	case <-c.m.done:
		return 0, io.ErrClosedPipe
	case <-c.closed:
		return 0, io.ErrClosedPipe
	default:
	}
	return c.m.write(c.id, p)
}

func (c *muxConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *muxConn) LocalAddr() net.Addr              { return c.m.trunk.LocalAddr() }
func (c *muxConn) RemoteAddr() net.Addr             { return c.m.trunk.RemoteAddr() }
func (c *muxConn) SetDeadline(time.Time) error      { return nil }
func (c *muxConn) SetReadDeadline(time.Time) error  { return nil }
func (c *muxConn) SetWriteDeadline(time.Time) error { return nil }

// oneConn is a listener whose only connection is a mux channel, so ttrpc.Server.Serve can take it.
type oneConn struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func listenOn(c net.Conn) *oneConn {
	l := &oneConn{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	l.conns <- c
	return l
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *oneConn) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *oneConn) Addr() net.Addr { return &net.UnixAddr{Name: "mux", Net: "unix"} }

// ---- runtime mode: containerd's side of an external NRI plugin ----

type session struct {
	m      *mux
	client *ttrpc.Client
}

type runtimeSide struct {
	path string
	mu   sync.Mutex
	lis  net.Listener
	cur  *session
}

func (r *runtimeSide) listen() error {
	os.Remove(r.path)
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return err
	}
	l, err := net.Listen("unix", r.path)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.lis = l
	r.mu.Unlock()
	go func() {
		for { // one plugin connection at a time, as NRI's accept loop does
			conn, err := l.Accept()
			if err != nil {
				return
			}
			r.serve(conn)
		}
	}()
	return nil
}

func (r *runtimeSide) report(name string) ttrpc.Method {
	return func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
		var req raw
		if err := unmarshal(&req); err != nil {
			return nil, err
		}
		emit(map[string]interface{}{"event": name, "payload": req.b})
		return &raw{}, nil
	}
}

func (r *runtimeSide) serve(conn net.Conn) {
	m := newMux(conn)
	pluginConn, runtimeConn := m.open(1), m.open(2)
	srv, err := ttrpc.NewServer()
	if err != nil {
		fatal(err)
	}
	srv.Register(runtimeService, map[string]ttrpc.Method{
		"RegisterPlugin":   r.report("RegisterPlugin"),
		"UpdateContainers": r.report("UpdateContainers"),
	})
	s := &session{m: m, client: ttrpc.NewClient(pluginConn)}
	go srv.Serve(context.Background(), listenOn(runtimeConn))
	r.mu.Lock()
	r.cur = s
	r.mu.Unlock()
	emit(map[string]interface{}{"event": "connected"})
	go m.reader() // started once the Runtime service is served, like NRI's blocked reader
	<-m.done
	srv.Close()
	s.client.Close()
	r.mu.Lock()
	if r.cur == s {
		r.cur = nil
	}
	r.mu.Unlock()
	emit(map[string]interface{}{"event": "disconnected"})
}

func (r *runtimeSide) current() *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

func (r *runtimeSide) drop() {
	if s := r.current(); s != nil {
		s.m.close("")
	}
}

func (r *runtimeSide) stop() {
	r.mu.Lock()
	l := r.lis
	r.lis = nil
	r.mu.Unlock()
	if l != nil {
		l.Close()
	}
	r.drop()
	os.Remove(r.path)
}

func percentile(sorted []time.Duration, q float64) float64 {
	i := int(float64(len(sorted)) * q)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i].Nanoseconds()) / 1e3
}

func (r *runtimeSide) handle(cmd command) {
	reply := func(v map[string]interface{}) { v["id"] = cmd.ID; emit(v) }
	service := cmd.Service
	if service == "" {
		service = pluginService
	}
	switch {
	case cmd.Call != "" && cmd.Op == "":
		s := r.current()
		if s == nil {
			reply(map[string]interface{}{"code": int(codes.Unavailable), "message": "no plugin connected"})
			return
		}
		go func() {
			p, code, msg, took := call(s.client, service, cmd.Call, cmd.Payload, cmd.TimeoutMs)
			reply(map[string]interface{}{"code": code, "message": msg, "payload": p, "micros": took.Microseconds()})
		}()
	case cmd.Op == "bench":
		s := r.current()
		if s == nil || cmd.N <= 0 {
			reply(map[string]interface{}{"code": int(codes.Unavailable), "message": "no plugin connected or n <= 0"})
			return
		}
		go func() {
			took := make([]time.Duration, 0, cmd.N)
			failures, lastErr := 0, ""
			start := time.Now()
			for i := 0; i < cmd.N; i++ {
				_, code, msg, d := call(s.client, service, cmd.Call, cmd.Payload, cmd.TimeoutMs)
				if code != 0 {
					failures++
					lastErr = msg
				}
				took = append(took, d)
			}
			elapsed := time.Since(start)
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			reply(map[string]interface{}{"code": 0, "n": cmd.N, "errors": failures, "last_error": lastErr,
				"p50_us": percentile(took, 0.50), "p99_us": percentile(took, 0.99),
				"calls_per_s": float64(cmd.N) / elapsed.Seconds()})
		}()
	case cmd.Op == "drop":
		r.drop()
		reply(map[string]interface{}{"ok": true})
	case cmd.Op == "stop":
		r.stop()
		reply(map[string]interface{}{"ok": true})
	case cmd.Op == "listen":
		if err := r.listen(); err != nil {
			reply(map[string]interface{}{"ok": false, "error": err.Error()})
			return
		}
		reply(map[string]interface{}{"ok": true})
	case cmd.Op == "stats":
		s := r.current()
		frames, largest := map[string]int{}, map[string]int{}
		if s != nil {
			s.m.mu.Lock()
			for id, n := range s.m.frames {
				frames[strconv.Itoa(int(id))] = n
				largest[strconv.Itoa(int(id))] = s.m.largest[id]
			}
			s.m.mu.Unlock()
		}
		reply(map[string]interface{}{"ok": s != nil, "frames": frames, "largest": largest})
	default:
		reply(map[string]interface{}{"ok": false, "error": "unknown command"})
	}
}

func runtimeMode(path string) {
	r := &runtimeSide{path: path}
	if err := r.listen(); err != nil {
		fatal(err)
	}
	emit(map[string]interface{}{"event": "listening"})
	commands(r.handle)
	r.stop()
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "gopeer:", err)
	os.Exit(1)
}

func main() {
	listen := flag.String("listen", "", "serve "+echoService+" with plain ttrpc on this Unix socket")
	dial := flag.String("dial", "", "be a plain ttrpc client of this Unix socket")
	socket := flag.String("socket", "", "be the runtime's NRI side listening on this Unix socket")
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
		flag.CommandLine.Parse(os.Args[2:])
	}
	switch {
	case mode == "ttrpc" && *listen != "":
		listenMode(*listen)
	case mode == "ttrpc" && *dial != "":
		dialMode(*dial)
	case mode == "runtime" && *socket != "":
		runtimeMode(*socket)
	default:
		fatal(errors.New("usage: gopeer ttrpc -listen PATH | ttrpc -dial PATH | runtime -socket PATH"))
	}
}
