// hostpath-peer: the Go provisioner wasmprov is measured against (issue #12).
//
// It is the sig-storage-lib-external-provisioner hostpath example
// (examples/hostpath-provisioner in that repository) with what a user of it
// would add, so that it does the same job as wasmprov's hostpath plugin: a
// directory per volume under --root, served as a hostPath volume, with node
// affinity for the node it runs for (--node), and the PV deleted with its
// directory. Not shipped: it lives in the test tree and is built by
// tests/cluster/build.sh next to the control plane.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// The annotation the example records its identity in, to ignore volumes
// another instance made.
const identityAnnotation = "hostPathProvisionerIdentity"

// A PV name is pvc-<uid>; anything else must never become a path.
var safeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

type hostPathProvisioner struct {
	root string
	node string
}

var _ controller.Provisioner = &hostPathProvisioner{}

func (p *hostPathProvisioner) Provision(ctx context.Context, options controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	if !safeName.MatchString(options.PVName) {
		return nil, controller.ProvisioningFinished, fmt.Errorf("unsafe volume name %q", options.PVName)
	}
	path := filepath.Join(p.root, options.PVName)
	if err := os.MkdirAll(path, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if options.StorageClass.ReclaimPolicy != nil {
		reclaim = *options.StorageClass.ReclaimPolicy
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        options.PVName,
			Annotations: map[string]string{identityAnnotation: p.node},
		},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   options.PVC.Spec.AccessModes,
			Capacity: v1.ResourceList{
				v1.ResourceStorage: options.PVC.Spec.Resources.Requests[v1.ResourceStorage],
			},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: path},
			},
			NodeAffinity: &v1.VolumeNodeAffinity{
				Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
					MatchExpressions: []v1.NodeSelectorRequirement{{
						Key:      "kubernetes.io/hostname",
						Operator: v1.NodeSelectorOpIn,
						Values:   []string{p.node},
					}},
				}}},
			},
		},
	}
	return pv, controller.ProvisioningFinished, nil
}

func (p *hostPathProvisioner) Delete(ctx context.Context, volume *v1.PersistentVolume) error {
	identity, ok := volume.Annotations[identityAnnotation]
	if !ok {
		return errors.New("identity annotation not found on PV")
	}
	if identity != p.node {
		return &controller.IgnoredError{Reason: "identity annotation on PV does not match ours"}
	}
	if !safeName.MatchString(volume.Name) {
		return fmt.Errorf("unsafe volume name %q", volume.Name)
	}
	return os.RemoveAll(filepath.Join(p.root, volume.Name))
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	name := flag.String("provisioner-name", "example.com/hostpath", "the provisioner name its StorageClasses use")
	root := flag.String("root", "", "directory under which each volume gets a directory (required)")
	node := flag.String("node", "", "the node the volumes are on: node affinity and identity (required)")
	qps := flag.Float64("kube-api-qps", 5, "client-go QPS (client-go's default: 5)")
	burst := flag.Int("kube-api-burst", 10, "client-go burst (client-go's default: 10)")
	threadiness := flag.Int("threadiness", 4, "claims and volumes processed at once (the library's default: 4)")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *root == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "hostpath-peer: --kubeconfig, --root and --node are required")
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
	}
	config.QPS = float32(*qps)
	config.Burst = *burst
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	syscall.Umask(0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pc := controller.NewProvisionController(ctx, client, *name,
		&hostPathProvisioner{root: *root, node: *node},
		controller.LeaderElection(false),
		controller.Threadiness(*threadiness),
	)
	pc.Run(ctx)
}
