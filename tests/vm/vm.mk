# The QEMU test rig (tests/vm): `make vm-setup` builds the guest (apt only, root),
# `make test-vm` runs the vm-marked tests in one fresh guest per topology and prints the wall
# time of each. VM_TOPOLOGIES=numa make test-vm picks some; VM_PYTEST_ARGS passes pytest args;
# VM_JOBS guests run at a time (a TCG guest's tests keep about one CPU busy; two-hosts, two
# guests itself, runs alone).
VM_DIR := tests/vm
VM_TOPOLOGIES ?= numa devdax devdax-kmem cxl two-hosts
VM_PYTEST_ARGS ?=
VM_TIMEOUT ?= 900
VM_JOBS ?= 2

.PHONY: vm-setup test-vm vm-run vm-clean

vm-setup:
	$(VM_DIR)/setup.sh

# two-hosts runs an MPI job across the guests (tests/vm/test_vm_mpi.py): the shim and the OSU
# programs are built on the host first (mk/mpi.mk)
test-vm: vm-setup build $(if $(filter two-hosts,$(VM_TOPOLOGIES)),mpi-shim osu-build)
	$(VPY) $(VM_DIR)/rig.py test --timeout $(VM_TIMEOUT) --jobs $(VM_JOBS) \
	  $(foreach t,$(VM_TOPOLOGIES),-t $(t)) -- $(VM_PYTEST_ARGS)

# Run VM_CMD in a fresh guest, e.g. make vm-run VM_TOPOLOGY=cxl VM_CMD='numactl -H'
VM_TOPOLOGY ?= numa
VM_CMD ?= numactl -H
vm-run: vm-setup
	$(VPY) $(VM_DIR)/rig.py run -t $(VM_TOPOLOGY) -- sh -c '$(VM_CMD)'

vm-clean:
	rm -rf $(VM_DIR)/.work
