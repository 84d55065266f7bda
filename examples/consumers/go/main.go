// Command consumer follows gpubus's event stream from a start time, decodes every event (msgpack),
// validates each against the published JSON Schema (docs/events/schemas) and prints a summary per node.
//
// It is the example of how to consume gpubus from Go: a JetStream ordered consumer on stream GPUBUS,
// msgpack bodies, unknown fields ignored, majors newer than the schemas it knows skipped and counted.
//
//	consumer -nats nats://127.0.0.1:4222 -schemas ../../../docs/events/schemas -since 2026-01-01T00:00:00Z
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/vmihailenco/msgpack/v5"
)

const stream = "GPUBUS"

// envelope is what every event carries besides its own fields.
type envelope struct {
	Kind string `msgpack:"kind"`
	V    int    `msgpack:"v"`
	ID   string `msgpack:"id"`
	Node string `msgpack:"node"`
}

// The few kinds the summary reads typed; every kind is validated against its schema.
type inventory struct {
	Devices []struct {
		ID string `msgpack:"id"`
	} `msgpack:"devices"`
}

type allocationDecided struct {
	Allocation struct {
		Devices [][]struct {
			Usedmem int64 `msgpack:"usedmem"`
		} `msgpack:"devices"`
	} `msgpack:"allocation"`
}

type deviceHealth struct {
	Healthy bool `msgpack:"healthy"`
}

// NodeSummary is what the stream said about one node ("_" for events about none).
type NodeSummary struct {
	Kinds        map[string]int `json:"kinds"`
	Devices      int            `json:"devices"`
	AllocatedMiB int64          `json:"allocated_mib"`
	Unhealthy    int            `json:"unhealthy"`
}

// Summary is the program's output.
type Summary struct {
	Events  int                     `json:"events"`
	Invalid int                     `json:"invalid"`
	Skipped int                     `json:"skipped"`
	Nodes   map[string]*NodeSummary `json:"nodes"`
}

var schemaName = regexp.MustCompile(`^(.+)\.v(\d+)\.json$`)

// schemas holds the compiled schema of every kind and major in a folder.
type schemas struct {
	byKey  map[string]*jsonschema.Schema // "<kind>.v<major>"
	newest map[string]int
}

func loadSchemas(dir string) (*schemas, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no schemas in %s", dir)
	}
	s := &schemas{byKey: map[string]*jsonschema.Schema{}, newest: map[string]int{}}
	c := jsonschema.NewCompiler()
	for _, path := range files {
		m := schemaName.FindStringSubmatch(filepath.Base(path))
		if m == nil {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		url := "file://" + filepath.ToSlash(path)
		if err := c.AddResource(url, doc); err != nil {
			return nil, err
		}
		compiled, err := c.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		major, _ := strconv.Atoi(m[2])
		s.byKey[m[1]+".v"+m[2]] = compiled
		if major > s.newest[m[1]] {
			s.newest[m[1]] = major
		}
	}
	return s, nil
}

var errSkip = errors.New("skipped")

// check decodes one body and validates it: errSkip for a kind or major this build does not know.
func (s *schemas) check(data []byte) (envelope, error) {
	var env envelope
	if err := msgpack.Unmarshal(data, &env); err != nil {
		return env, fmt.Errorf("not a msgpack event: %w", err)
	}
	newest, known := s.newest[env.Kind]
	if !known || env.V > newest {
		return env, fmt.Errorf("%w: %s v%d", errSkip, env.Kind, env.V)
	}
	schema := s.byKey[fmt.Sprintf("%s.v%d", env.Kind, env.V)]
	if schema == nil {
		return env, fmt.Errorf("%s: no schema for v%d", env.Kind, env.V)
	}
	var body any
	if err := msgpack.Unmarshal(data, &body); err != nil {
		return env, err
	}
	asJSON, err := json.Marshal(body)
	if err != nil {
		return env, err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(asJSON))
	if err != nil {
		return env, err
	}
	if err := schema.Validate(inst); err != nil {
		return env, fmt.Errorf("%s %s: %w", env.Kind, env.ID, err)
	}
	return env, nil
}

func (sum *Summary) add(env envelope, data []byte) error {
	node := env.Node
	if node == "" {
		node = "_"
	}
	n := sum.Nodes[node]
	if n == nil {
		n = &NodeSummary{Kinds: map[string]int{}}
		sum.Nodes[node] = n
	}
	n.Kinds[env.Kind]++
	sum.Events++
	switch env.Kind {
	case "inventory.snapshot":
		var inv inventory
		if err := msgpack.Unmarshal(data, &inv); err != nil {
			return err
		}
		n.Devices = len(inv.Devices)
	case "allocation.decided":
		var d allocationDecided
		if err := msgpack.Unmarshal(data, &d); err != nil {
			return err
		}
		for _, slot := range d.Allocation.Devices {
			for _, card := range slot {
				n.AllocatedMiB += card.Usedmem
			}
		}
	case "device.health":
		var h deviceHealth
		if err := msgpack.Unmarshal(data, &h); err != nil {
			return err
		}
		if !h.Healthy {
			n.Unhealthy++
		}
	}
	return nil
}

func parseSince(text string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, text); err == nil {
		return t, nil
	}
	secs, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("-since %q: expected RFC 3339 or unix seconds", text)
	}
	return time.Unix(0, int64(secs*1e9)), nil
}

func run(ctx context.Context, url, schemaDir string, since time.Time, follow bool) (*Summary, error) {
	known, err := loadSchemas(schemaDir)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, nats.Name("gpubus-example-go"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Nodes: map[string]*NodeSummary{}}
	str, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		return nil, err
	}
	if !follow && (info.State.Msgs == 0 || info.State.LastTime.Before(since)) {
		return sum, nil // nothing stored at or after the start time
	}
	cons, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"gpubus.>"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return nil, err
	}
	msgs, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	defer msgs.Stop()
	go func() { <-ctx.Done(); msgs.Stop() }()
	for {
		msg, err := msgs.Next()
		if err != nil {
			if ctx.Err() != nil {
				return sum, fmt.Errorf("stopped before catching up: %w", ctx.Err())
			}
			return sum, err
		}
		env, err := known.check(msg.Data())
		switch {
		case errors.Is(err, errSkip):
			sum.Skipped++
		case err != nil:
			sum.Invalid++
			fmt.Fprintf(os.Stderr, "invalid on %s: %v\n", msg.Subject(), err)
		default:
			if err := sum.add(env, msg.Data()); err != nil {
				sum.Invalid++
				fmt.Fprintf(os.Stderr, "undecodable on %s: %v\n", msg.Subject(), err)
			}
		}
		meta, err := msg.Metadata()
		if err != nil {
			return sum, err
		}
		if !follow && meta.NumPending == 0 {
			return sum, nil
		}
	}
}

func printTable(sum *Summary) {
	names := make([]string, 0, len(sum.Nodes))
	for name := range sum.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Printf("%d events (%d invalid, %d skipped)\n", sum.Events, sum.Invalid, sum.Skipped)
	for _, name := range names {
		n := sum.Nodes[name]
		fmt.Printf("%-20s devices %-3d allocated %7d MiB  unhealthy %d  events %v\n",
			name, n.Devices, n.AllocatedMiB, n.Unhealthy, n.Kinds)
	}
}

func main() {
	url := flag.String("nats", "nats://127.0.0.1:4222", "NATS URL")
	schemaDir := flag.String("schemas", "docs/events/schemas", "folder of the published JSON Schemas")
	sinceText := flag.String("since", "0", "start time: RFC 3339 or unix seconds")
	follow := flag.Bool("follow", false, "keep following after catching up (Ctrl-C to stop)")
	asJSON := flag.Bool("json", false, "print the summary as JSON")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long (without -follow)")
	flag.Parse()
	since, err := parseSince(*sinceText)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	if !*follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	sum, err := run(ctx, *url, *schemaDir, since, *follow)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	if *asJSON {
		out, _ := json.Marshal(sum)
		fmt.Println(string(out))
	} else {
		printTable(sum)
	}
}
