// `pipetrain emulate DECK --ranks N`: the sequential emulator (emulator.hpp) for the layout
// of N ranks, one process; writes deck.toml, weights.h5 and emulator.json (the schedule, the
// layout, the steps and every step's loss) into the run directory, like a run.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "emulator.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/report.hpp"

namespace pt {

int cmd_emulate(const EmulateArgs& a) {
  const Deck deck = load_deck(a.deck, a.sets);
  const TrainSetup setup = TrainSetup::from_deck(deck, a.ranks);
  SequentialEmulator emu(deck, setup);
  emu.run();
  const std::string dir = deck.run.output_dir + "/" + deck.run.name;
  make_dirs(dir);
  write_file_atomic(dir + "/deck.toml", deck.effective_toml());
  write_weights_h5(dir + "/weights.h5", *setup.model, emu.layer_weights(), deck, emu.train_data().input_transform());
  const std::vector<double>& step_loss = emu.step_losses();
  nlohmann::json j = {{"emulated_schedule", setup.def->name}, {"layout", setup.layout.str()}, {"steps", emu.total_steps()},
                      {"step_losses", step_loss}};
  write_file_atomic(dir + "/emulator.json", j.dump(1) + "\n");
  std::printf("emulated %s on %s for %lld steps; final step loss %.6f; wrote %s/{weights.h5, emulator.json}\n",
              setup.def->name.c_str(), setup.layout.str().c_str(), static_cast<long long>(emu.total_steps()),
              step_loss.empty() ? 0.0 : step_loss.back(), dir.c_str());
  return 0;
}

}  // namespace pt
