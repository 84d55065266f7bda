// Command fake-cri serves the Kubernetes fake CRI runtime (k8s.io/cri-client/pkg/fake) on a unix
// socket for one kubelet: containers "run" without any process. Every CreateContainer request is
// also written as JSON to --record-dir, so tests can read back the env, mounts and devices that the
// kubelet passed on from the device plugin's Allocate answer.
//
// The upstream fake gives every pod the address 192.168.192.168, which the kubelet's probes would
// then call; here each pod gets an address of its own in --ip-prefix (a /16 of 127.0.0.0/8, one per
// node) instead, so nothing a pod spec asks for ever leaves the machine.
//
// Containers end as they would on a node: an init container (read from the pod, with --kubeconfig)
// exits 0 a moment after it starts, and an app container exits 0 once its pod's
// gpubus.io/sim-duration annotation runs out (as in gpubus's simulator; none or "inf": never).
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// durationAnnotation is how long a pod's app containers run (gpubus's simulator reads it too).
const durationAnnotation = "gpubus.io/sim-duration"

// initLifetime is how long an init container runs before it exits 0.
const initLifetime = 200 * time.Millisecond

// recorder is the fake runtime with CreateContainer recorded on disk.
type recorder struct {
	*fake.RemoteRuntime
	dir    string
	prefix string // the first two octets of every pod address, e.g. "127.100"

	kube kubernetes.Interface // nil: init containers are not told apart

	mu        sync.Mutex
	ips       map[string]string        // sandbox id -> its loopback address
	lifetimes map[string]time.Duration // container id -> how long it runs once started
}

// lifetime says how long a container runs: init containers briefly, app containers as their pod's
// annotation says; ok=false runs it until it is stopped.
func (r *recorder) lifetime(ctx context.Context, req *kubeapi.CreateContainerRequest) (time.Duration, bool) {
	meta := req.GetSandboxConfig().GetMetadata()
	name := req.GetConfig().GetMetadata().GetName()
	if r.kube != nil {
		pod, err := r.kube.CoreV1().Pods(meta.GetNamespace()).Get(ctx, meta.GetName(), metav1.GetOptions{})
		if err != nil {
			log.Printf("pod %s/%s: %v (its containers run until stopped)", meta.GetNamespace(), meta.GetName(), err)
		} else if isInit(pod, name) {
			return initLifetime, true
		}
	}
	return parseLifetime(req.GetSandboxConfig().GetAnnotations()[durationAnnotation])
}

func isInit(pod *corev1.Pod, container string) bool {
	for _, c := range pod.Spec.InitContainers {
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if c.Name == container && !sidecar {
			return true
		}
	}
	return false
}

// parseLifetime reads "60s", "1m30s" or plain seconds; "", "inf" and "never" are forever.
func parseLifetime(value string) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" || value == "inf" || value == "never" {
		return 0, false
	}
	if seconds, err := strconv.ParseFloat(value, 64); err == nil {
		return time.Duration(seconds * float64(time.Second)), true
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		log.Printf("%s=%q is no duration: the container runs until stopped", durationAnnotation, value)
		return 0, false
	}
	return d, true
}

func (r *recorder) StartContainer(ctx context.Context, req *kubeapi.StartContainerRequest) (*kubeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	d, ok := r.lifetimes[req.GetContainerId()]
	delete(r.lifetimes, req.GetContainerId())
	r.mu.Unlock()
	if ok {
		id := req.GetContainerId()
		time.AfterFunc(d, func() { r.exit(id) })
	}
	return resp, nil
}

// exit ends a running container with exit code 0, as a finished process would.
func (r *recorder) exit(id string) {
	r.RuntimeService.Lock()
	defer r.RuntimeService.Unlock()
	c, ok := r.RuntimeService.Containers[id]
	if !ok || c.State != kubeapi.ContainerState_CONTAINER_RUNNING {
		return
	}
	c.State = kubeapi.ContainerState_CONTAINER_EXITED
	c.ExitCode = 0
	c.Reason = "Completed"
	c.FinishedAt = time.Now().UnixNano()
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
	if d, ok := r.lifetime(ctx, req); ok {
		r.mu.Lock()
		r.lifetimes[resp.GetContainerId()] = d
		r.mu.Unlock()
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
	kubeconfig := flag.String("kubeconfig", "", "the node's kubeconfig, to tell init containers apart")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("--endpoint is required")
	}
	if *recordDir != "" {
		if err := os.MkdirAll(*recordDir, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	runtime := &recorder{RemoteRuntime: fake.NewFakeRemoteRuntime(), dir: *recordDir, prefix: *ipPrefix,
		ips: map[string]string{}, lifetimes: map[string]time.Duration{}}
	if *kubeconfig != "" {
		config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			log.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
		}
		runtime.kube = kubernetes.NewForConfigOrDie(config)
	}
	runtime.ImageService.SetFakeImageSize(1 << 20) // the kubelet refuses an image without a size
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
