; Inno Setup 6 script: a Windows installer for the one-folder bundle.
;
;   iscc /DAppVersion=0.2.0 /DBundle=dist\cadre-desktop /DIcon=build\cadre-desktop\icons\cadre-desktop.ico
;        /DOutDir=dist packaging\windows\cadre-desktop.iss
;
; packaging\build.ps1 -Installer runs it. Installs for the current user without asking for
; administrator rights (or for everyone, if chosen), a Start menu entry, an uninstaller in
; "Installed apps". Uninstalling removes the program and the login entry the app may have
; set ("Start at login"); the nodes' data in the user's folders stays.
#ifndef AppVersion
  #error Pass /DAppVersion=X.Y.Z (cadre_desktop.__version__)
#endif

[Setup]
; Never change the AppId: it is how Windows knows an upgrade from a second app.
AppId={{5C05C2A8-EBB0-47E8-9858-0B365DDE8B80}
AppName=cadre-desktop
AppVersion={#AppVersion}
AppVerName=cadre-desktop {#AppVersion}
AppPublisher=The cadre-desktop developers
DefaultDirName={autopf}\cadre-desktop
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#OutDir}
OutputBaseFilename=cadre-desktop-{#AppVersion}-windows-x64-setup
SetupIconFile={#Icon}
UninstallDisplayIcon={app}\cadre-desktop.exe
Compression=lzma2
SolidCompression=yes
WizardStyle=modern
; The tray app and its nodes run from {app}: close them before files are replaced or removed.
CloseApplications=force

[Files]
Source: "{#Bundle}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\cadre-desktop"; Filename: "{app}\cadre-desktop.exe"

[Registry]
; Written by the app itself ("Start at login"), never by setup: only removed on uninstall.
Root: HKCU; Subkey: "Software\Microsoft\Windows\CurrentVersion\Run"; ValueType: none; ValueName: "cadre-desktop"; Flags: uninsdeletevalue dontcreatekey

[Run]
Filename: "{app}\cadre-desktop.exe"; Description: "Start cadre-desktop"; Flags: nowait postinstall skipifsilent
