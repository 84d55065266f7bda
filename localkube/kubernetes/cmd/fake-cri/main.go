// Command fake-cri serves the Kubernetes fake CRI runtime (k8s.io/cri-client/pkg/fake) on a unix
// socket for one kubelet: containers "run" without any process. Every CreateContainer request is
// also written as JSON to --record-dir, so tests can read back the env, mounts and devices that the
// kubelet passed on from the device plugin's Allocate answer.
//
// The upstream fake gives every pod the address 192.168.192.168, which the kubelet's probes would
// then call; here each pod gets an address of its own in --ip-prefix (a /16 of 127.0.0.0/8, one per
// node) instead, so nothing a pod spec asks for ever leaves the machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

// recorder is the fake runtime with CreateContainer recorded on disk.
type recorder struct {
	*fake.RemoteRuntime
	dir    string
	prefix string // the first two octets of every pod address, e.g. "127.100"

	mu  sync.Mutex
	ips map[string]string // sandbox id -> its loopback address
}

// ipOf gives each sandbox its own loopback address in the node's /16.
func (r *recorder) ipOf(sandbox string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ip, ok := r.ips[sandbox]; ok {
		return ip
	}
	n := len(r.ips) + 2
	ip := fmt.Sprintf("%s.%d.%d", r.prefix, (n/254)%256, n%254+1)
	r.ips[sandbox] = ip
	return ip
}

func (r *recorder) PodSandboxStatus(ctx context.Context, req *kubeapi.PodSandboxStatusRequest) (*kubeapi.PodSandboxStatusResponse, error) {
	resp, err := r.RemoteRuntime.PodSandboxStatus(ctx, req)
	if err != nil || resp.GetStatus() == nil {
		return resp, err
	}
	status := resp.Status
	if status.GetLinux().GetNamespaces().GetOptions().GetNetwork() == kubeapi.NamespaceMode_NODE {
		status.Network = &kubeapi.PodSandboxNetworkStatus{Ip: "127.0.0.1"}
	} else {
		status.Network = &kubeapi.PodSandboxNetworkStatus{Ip: r.ipOf(status.GetId())}
	}
	return resp, nil
}

// record is what one CreateContainer request carried that gpubus's tests check.
type record struct {
	PodSandboxID string              `json:"podSandboxId"`
	Namespace    string              `json:"namespace"`
	Pod          string              `json:"pod"`
	PodUID       string              `json:"podUid"`
	Container    string              `json:"container"`
	Envs         map[string]string   `json:"envs"`
	Mounts       []map[string]string `json:"mounts"`
	Devices      []map[string]string `json:"devices"`
	CDIDevices   []string            `json:"cdiDevices"`
	Annotations  map[string]string   `json:"annotations"`
}

func (r *recorder) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	if r.dir != "" {
		if err := r.write(req, resp.ContainerId); err != nil {
			log.Printf("record %s: %v", resp.ContainerId, err)
		}
	}
	return resp, nil
}

func (r *recorder) write(req *kubeapi.CreateContainerRequest, id string) error {
	cfg, meta := req.GetConfig(), req.GetSandboxConfig().GetMetadata()
	rec := record{
		PodSandboxID: req.GetPodSandboxId(),
		Namespace:    meta.GetNamespace(),
		Pod:          meta.GetName(),
		PodUID:       meta.GetUid(),
		Container:    cfg.GetMetadata().GetName(),
		Envs:         map[string]string{},
		Annotations:  cfg.GetAnnotations(),
	}
	for _, e := range cfg.GetEnvs() {
		rec.Envs[e.GetKey()] = string(e.GetValue())
	}
	for _, m := range cfg.GetMounts() {
		rec.Mounts = append(rec.Mounts, map[string]string{
			"containerPath": m.GetContainerPath(), "hostPath": m.GetHostPath(),
			"readonly": fmt.Sprint(m.GetReadonly()),
		})
	}
	for _, d := range cfg.GetDevices() {
		rec.Devices = append(rec.Devices, map[string]string{
			"containerPath": d.GetContainerPath(), "hostPath": d.GetHostPath(),
			"permissions": d.GetPermissions(),
		})
	}
	for _, c := range cfg.GetCDIDevices() {
		rec.CDIDevices = append(rec.CDIDevices, c.GetName())
	}
	body, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s_%s_%s.json", rec.Namespace, rec.Pod, rec.Container)
	tmp := filepath.Join(r.dir, "."+name)
	if err := os.WriteFile(tmp, body, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(r.dir, name))
}

func main() {
	endpoint := flag.String("endpoint", "", "unix socket to serve, as unix:///path/to/cri.sock")
	recordDir := flag.String("record-dir", "", "directory for one JSON file per created container")
	ipPrefix := flag.String("ip-prefix", "127.100", "first two octets of the pods' loopback addresses")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("--endpoint is required")
	}
	if *recordDir != "" {
		if err := os.MkdirAll(*recordDir, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	runtime := &recorder{RemoteRuntime: fake.NewFakeRemoteRuntime(), dir: *recordDir, prefix: *ipPrefix, ips: map[string]string{}}
	runtime.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true},
		{Type: kubeapi.NetworkReady, Status: true},
	}}
	go forgetCalls(runtime)
	listener, err := util.CreateListener(*endpoint)
	if err != nil {
		log.Fatalf("listen on %s: %v", *endpoint, err)
	}
	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, runtime)
	kubeapi.RegisterImageServiceServer(server, runtime)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("fake CRI runtime serving %s", *endpoint)
	if err := server.Serve(listener); err != nil {
		log.Fatal(err)
	}
}

// forgetCalls empties the fake's log of every call it served, which it keeps for tests that inspect
// it and which would otherwise grow for as long as the kubelet polls.
func forgetCalls(r *recorder) {
	for range time.Tick(10 * time.Second) {
		r.RuntimeService.Lock()
		r.RuntimeService.Called = nil
		r.RuntimeService.Unlock()
	}
}
